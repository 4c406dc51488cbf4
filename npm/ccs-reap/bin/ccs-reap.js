#!/usr/bin/env node
'use strict';
// The `ccs-reap` command of the npm package: runs the native binary with the same arguments,
// standard streams and environment, passes on the signals it gets (and SIGTERM when its parent
// dies), and exits as it did (with its exit code, or by the same signal). Hooks must not come through here (node's own start
// is about 0.2 s): `ccs-reap claude-settings` writes the native binary's path, not this one.

const { spawn } = require('child_process');
const { resolveBinary } = require('../lib/index.js');

let bin;
try {
  bin = resolveBinary();
} catch (e) {
  process.stderr.write(`${e.message}\n`);
  process.exit(1);
}

const child = spawn(bin, process.argv.slice(2), { stdio: 'inherit' });
const forwarded = ['SIGINT', 'SIGTERM', 'SIGHUP', 'SIGQUIT', 'SIGUSR1', 'SIGUSR2', 'SIGWINCH'];
for (const sig of forwarded) {
  process.on(sig, () => {
    try {
      child.kill(sig);
    } catch (_) {
      // already gone
    }
  });
}
// `npx ccs-reap` and `npm exec ccs-reap` run this shim through `sh -c`: a SIGTERM to npm (a
// process manager stopping it) ends npm and that shell at once and never reaches us, which are
// left to init. So when our parent is gone, stop the binary as if we had the SIGTERM: the daemon
// ends with whatever started it (its sweep in flight and teardowns finish first).
const parent = process.ppid;
const orphaned = setInterval(() => {
  if (process.ppid !== parent) {
    clearInterval(orphaned);
    try {
      child.kill('SIGTERM');
    } catch (_) {
      // already gone
    }
  }
}, 250);
child.on('error', (e) => {
  process.stderr.write(`ccs-reap: failed to run ${bin}: ${e.message}\n`);
  process.exit(1);
});
child.on('exit', (code, signal) => {
  clearInterval(orphaned);
  if (signal) {
    // Die of the same signal, as a shell would see the binary die.
    for (const sig of forwarded) process.removeAllListeners(sig);
    process.kill(process.pid, signal);
    setTimeout(() => process.exit(128 + (require('os').constants.signals[signal] || 0)), 100);
    return;
  }
  process.exit(code);
});
