'use strict';
// ccs-reap for Node: where the native binary is, and a small promise API over it. No logic of
// its own: every call runs the binary once (no shell) and reads its exit code or its --json.

const { execFile } = require('child_process');

const ARCHES = { x64: 'x64', arm64: 'arm64' };

/** musl when this node reports no glibc (Alpine), else gnu. */
function libc() {
  try {
    const report = process.report && process.report.getReport();
    const header = report && (typeof report === 'string' ? JSON.parse(report) : report).header;
    return header && header.glibcVersionRuntime ? 'gnu' : 'musl';
  } catch (_) {
    return 'gnu';
  }
}

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
  const mine = libc();
  const other = mine === 'gnu' ? 'musl' : 'gnu';
  const tried = [];
  for (const l of [mine, other]) {
    const pkg = `@ccs-reap/linux-${arch}-${l}`;
    tried.push(pkg);
    try {
      return require.resolve(`${pkg}/bin/ccs-reap`);
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
      `(from this source tree: scripts/package-npm, then npm install target/npm/local/*.tgz), ` +
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
  const bin = opts.binary || resolveBinary();
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
  const r = await run(['turn', 'begin', String(id)], opts);
  if (r.code === 0) return 'go';
  if (r.code === 4) return 'respawn';
  throw failed('turn begin', r);
}

/** `turn end <id>`: 'ended' (exit 0) or 'respawn' (exit 4: the session is gone). */
async function turnEnd(id, opts) {
  const r = await run(['turn', 'end', String(id)], opts);
  if (r.code === 0) return 'ended';
  if (r.code === 4) return 'respawn';
  throw failed('turn end', r);
}

/**
 * `spawn <id> [--cid C] [--cwd D] -- <cmd...>`: the --json document
 * ({ ok, session, result: 'spawned' | 'exists', exit }).
 */
async function spawn(id, cmd, opts = {}) {
  if (!Array.isArray(cmd) || cmd.length === 0) {
    throw new TypeError('ccs-reap spawn: cmd must be a non-empty array of strings');
  }
  const args = ['spawn', '--json', String(id)];
  if (opts.cid) args.push('--cid', String(opts.cid));
  if (opts.sessionCwd) args.push('--cwd', String(opts.sessionCwd));
  args.push('--', ...cmd.map(String));
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

module.exports = { resolveBinary, run, turnBegin, turnEnd, spawn, status, CcsReapError };
Object.defineProperty(module.exports, 'binaryPath', {
  enumerable: true,
  get: resolveBinary,
});
