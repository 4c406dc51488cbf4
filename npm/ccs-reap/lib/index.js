'use strict';
// ccs-reap for Node: where the native binary is, and a promise API over every command. No logic
// of its own: every call runs the binary once (no shell, never blocking the event loop) and reads
// its exit code or its --json. User values come after `--`, never taken for a flag.

const { execFile, spawn: spawnChild } = require('child_process');
const fs = require('fs');
const readline = require('readline');

const ARCHES = { x64: 'x64', arm64: 'arm64' };

/**
 * musl on Alpine (its release file), else gnu: only the order in which the two packages are
 * looked for (both binaries are static; npm installs the one its own libc test picks). Never
 * process.report.getReport(), which blocks the event loop for about 19 ms.
 */
function libc() {
  return fs.existsSync('/etc/alpine-release') ? 'musl' : 'gnu';
}

/** The platform package's binary once found: it does not move while this process runs. */
let found;

/**
 * The native binary: CCS_REAP_BINARY when set, else the one in this platform's package
 * (@ccs-reap/linux-<cpu>-<libc>; the x64 and arm64 binaries are static, so the other libc's
 * package of the same cpu does as well). Throws, saying what is missing, when there is none.
 */
function resolveBinary() {
  const override = process.env.CCS_REAP_BINARY;
  if (override) return override;
  const arch = ARCHES[process.arch];
  if (process.platform !== 'linux' || !arch) {
    throw new Error(
      `ccs-reap: no binary for ${process.platform}-${process.arch} (there are Linux x64 and arm64 ` +
        'packages only); build it (cargo install ccs-reap) and set CCS_REAP_BINARY to its path'
    );
  }
  if (found) return found;
  const mine = libc();
  const other = mine === 'gnu' ? 'musl' : 'gnu';
  const tried = [];
  for (const l of [mine, other]) {
    const pkg = `@ccs-reap/linux-${arch}-${l}`;
    tried.push(pkg);
    try {
      found = require.resolve(`${pkg}/bin/ccs-reap`);
      return found;
    } catch (_) {
      // not installed: the next one
    }
  }
  // npm installs a platform package as an optional dependency and succeeds without it (no
  // install script checks it: pnpm 10 runs none), so this first run says exactly what to do.
  const version = require('../package.json').version;
  throw new Error(
    `ccs-reap: its native binary is not installed: none of ${tried.join(', ')} is there (an ` +
      'install with --omit=optional or --no-optional, or a lockfile made on another platform, ' +
      `leaves it out). Install it beside ccs-reap ${version}: npm install ${tried[0]}@${version} ` +
      '(from a source tree: scripts/package-npm there, then ' +
      'npm install <tree>/target/npm/local/*.tgz here), ' +
      'or set CCS_REAP_BINARY to a ccs-reap binary'
  );
}

/** An error from a run of the binary: its exit code and what it said. */
class CcsReapError extends Error {
  constructor(message, code, stderr, stdout) {
    super(message);
    this.name = 'CcsReapError';
    this.code = code;
    this.stderr = stderr;
    this.stdout = stdout;
  }
}

/** Run the binary with `args`; resolve { code, stdout, stderr } whatever the exit code. */
function run(args, opts = {}) {
  let bin;
  try {
    bin = opts.binary || resolveBinary();
  } catch (e) {
    return Promise.reject(new CcsReapError(e.message, null, '', ''));
  }
  return new Promise((resolve, reject) => {
    execFile(
      bin,
      args,
      {
        env: opts.env || process.env,
        cwd: opts.cwd,
        timeout: opts.timeoutMs || 0,
        maxBuffer: 64 << 20,
        encoding: 'utf8',
      },
      (err, stdout, stderr) => {
        if (err && typeof err.code !== 'number') {
          const how = err.signal ? `killed by ${err.signal}` : err.message;
          reject(new CcsReapError(`ccs-reap ${args[0] || ''}: ${how}`, null, stderr, stdout));
          return;
        }
        resolve({ code: err ? err.code : 0, stdout, stderr });
      }
    );
  });
}

function failed(what, r) {
  const said = (r.stderr || '').trim() || (r.stdout || '').trim();
  return new CcsReapError(`ccs-reap ${what}: exit ${r.code}${said ? `: ${said}` : ''}`, r.code, r.stderr, r.stdout);
}

/** `turn begin <id>`: 'go' (exit 0) or 'respawn' (exit 4: the session is gone; spawn it). */
async function turnBegin(id, opts) {
  const r = await run(['turn', 'begin', '--', String(id)], opts);
  if (r.code === 0) return 'go';
  if (r.code === 4) return 'respawn';
  throw failed('turn begin', r);
}

/** `turn end <id>`: 'ended' (exit 0) or 'respawn' (exit 4: the session is gone). */
async function turnEnd(id, opts) {
  const r = await run(['turn', 'end', '--', String(id)], opts);
  if (r.code === 0) return 'ended';
  if (r.code === 4) return 'respawn';
  throw failed('turn end', r);
}

/**
 * `spawn [--cid C] [--cwd D] [--agent A] [--new-conversation] -- <id> [-- <cmd...>]`: the --json
 * document ({ ok, session, result: 'spawned' | 'exists', exit }). An empty `cmd` (or none)
 * replays the command line the chat's tombstone keeps.
 */
async function spawn(id, cmd = [], opts = {}) {
  if (!Array.isArray(cmd)) {
    throw new TypeError('ccs-reap spawn: cmd must be an array of strings ([] replays the tombstone\'s)');
  }
  // No user-given value can be read as a flag: each option's value is joined to it with `=`,
  // the id follows a first `--` and the command a second (`spawn -- -h -- claude`).
  const args = ['spawn', '--json'];
  if (opts.cid) args.push(`--cid=${String(opts.cid)}`);
  if (opts.sessionCwd) args.push(`--cwd=${String(opts.sessionCwd)}`);
  if (opts.agent) args.push(`--agent=${String(opts.agent)}`);
  if (opts.newConversation) args.push('--new-conversation');
  args.push('--', String(id));
  if (cmd.length > 0) args.push('--', ...cmd.map(String));
  const r = await run(args, opts);
  if (r.code !== 0) throw failed('spawn', r);
  return JSON.parse(r.stdout);
}

/** `status --json`, parsed. */
async function status(opts) {
  const r = await run(['status', '--json'], opts);
  let doc;
  try {
    doc = JSON.parse(r.stdout);
  } catch (_) {
    throw failed('status', r);
  }
  if (r.code !== 0) {
    const e = failed('status', r);
    e.status = doc;
    throw e;
  }
  return doc;
}

/** A command's --json document whatever its exit code; `ok` maps exit codes to a result. */
async function jsonOf(what, args, opts, ok) {
  const r = await run(args, opts);
  let doc;
  try {
    doc = JSON.parse(r.stdout);
  } catch (_) {
    throw failed(what, r);
  }
  const out = ok(r.code, doc);
  if (out === undefined) {
    const e = failed(what, r);
    e.status = doc;
    throw e;
  }
  return out;
}

/** `resume <id>` (no terminal: it attaches nothing): { result: 'live' | 'spawned', attach }. */
function resume(id, opts) {
  return jsonOf('resume', ['resume', '--json', '--', String(id)], opts, (c, d) => (c === 0 ? d : undefined));
}

/** `forget <id>`: drop an asleep chat's tombstone: { result: 'forgotten', cid }. */
function forget(id, opts) {
  return jsonOf('forget', ['forget', '--json', '--', String(id)], opts, (c, d) => (c === 0 ? d : undefined));
}

/** `reap <id> [--force] [--dry-run]`: the reap's audit line (or the dry run's answer). */
function reap(id, opts = {}) {
  const args = ['reap', '--json'];
  if (opts.force) args.push('--force');
  if (opts.dryRun) args.push('--dry-run');
  args.push('--', String(id));
  return jsonOf('reap', args, opts, (c, d) => (c === 0 ? d : undefined));
}

/** `pin <id>` / `unpin <id>`: 'pinned' / 'unpinned' (exit 0), 'gone' (exit 4). */
function pinLike(verb, done) {
  return (id, opts) =>
    jsonOf(verb, [verb, '--json', '--', String(id)], opts, (c) => (c === 0 ? done : c === 4 ? 'gone' : undefined));
}
const pin = pinLike('pin', 'pinned');
const unpin = pinLike('unpin', 'unpinned');

/** `doctor --json`: { ok, checks } whether healthy (exit 0) or not (exit 1). */
function doctor(opts) {
  return jsonOf('doctor', ['doctor', '--json'], opts, (c, d) => (c === 0 || c === 1 ? d : undefined));
}

/** `config --json`: every setting in effect and where it came from. */
function config(opts) {
  return jsonOf('config', ['config', '--json'], opts, (c, d) => (c === 0 ? d : undefined));
}

/**
 * `events [--from-start]`: each audit line as it is appended, as an async iterable of parsed
 * objects; `close()` stops the binary (SIGTERM) and ends the iteration.
 */
function events(opts = {}) {
  let bin;
  try {
    bin = opts.binary || resolveBinary();
  } catch (e) {
    throw new CcsReapError(e.message, null, '', '');
  }
  const args = ['events'];
  if (opts.fromStart) args.push('--from-start');
  const child = spawnChild(bin, args, { env: opts.env || process.env, cwd: opts.cwd, stdio: ['ignore', 'pipe', 'pipe'] });
  let stderr = '';
  child.stderr.setEncoding('utf8');
  child.stderr.on('data', (d) => {
    stderr = (stderr + d).slice(-65536);
  });
  const exited = new Promise((resolve) => {
    child.on('error', (e) => resolve({ code: null, error: e }));
    child.on('close', (code, signal) => resolve({ code, signal }));
  });
  const lines = readline.createInterface({ input: child.stdout, crlfDelay: Infinity });
  return {
    close() {
      child.kill('SIGTERM');
      return exited;
    },
    async *[Symbol.asyncIterator]() {
      for await (const l of lines) {
        if (l.trim()) yield JSON.parse(l);
      }
      const end = await exited;
      if (end.error || (end.code !== 0 && end.signal !== 'SIGTERM')) {
        const how = end.error ? end.error.message : `exit ${end.code}`;
        throw new CcsReapError(`ccs-reap events: ${how}${stderr.trim() ? `: ${stderr.trim()}` : ''}`, end.code, stderr, '');
      }
    },
  };
}

module.exports = {
  resolveBinary,
  run,
  turnBegin,
  turnEnd,
  spawn,
  status,
  resume,
  forget,
  reap,
  pin,
  unpin,
  doctor,
  config,
  events,
  CcsReapError,
};
Object.defineProperty(module.exports, 'binaryPath', {
  enumerable: true,
  get: resolveBinary,
});
