'use strict';
// The installed ccs-reap npm package, against a private tmux server (scripts/check-npm runs it in
// a project where the tarballs were installed with no registry). Env: SOCK (the server's socket,
// -S), STATE (a state dir), NATIVE (the path binaryPath must give), FAKE_CLAUDE (a stand-in
// claude: scripts/fake-claude).
const assert = require('assert');
const fs = require('fs');
const path = require('path');
const reap = require('ccs-reap');

async function main() {
  const env = { ...process.env, CCS_TMUX_SOCKET_PATH: process.env.SOCK, CCS_REAP_STATE_DIR: process.env.STATE };
  delete env.TMUX;
  delete env.CCS_REAP_BINARY;
  const saved = process.env.CCS_REAP_BINARY;
  delete process.env.CCS_REAP_BINARY;
  // The platform package's binary, found with require.resolve.
  assert.strictEqual(fs.realpathSync(reap.binaryPath), fs.realpathSync(process.env.NATIVE));
  assert.match(reap.binaryPath, /node_modules\/@ccs-reap\/linux-x64-gnu\/bin\/ccs-reap$/);
  // CCS_REAP_BINARY wins.
  process.env.CCS_REAP_BINARY = '/nonexistent/ccs-reap';
  assert.strictEqual(reap.binaryPath, '/nonexistent/ccs-reap');
  await assert.rejects(reap.turnBegin('x', { env }), (e) => e instanceof reap.CcsReapError && e.code === null);
  delete process.env.CCS_REAP_BINARY;
  if (saved !== undefined) process.env.CCS_REAP_BINARY = saved;

  // No session yet: respawn (exit 4).
  assert.strictEqual(await reap.turnBegin('a1', { env }), 'respawn');
  assert.strictEqual(await reap.turnEnd('a1', { env }), 'respawn');
  // A command that is no agent's cannot be given the conversation: refused, unless asked.
  await assert.rejects(reap.spawn('a1', ['sh', '-c', 'exec sleep 100000', 'chat'], { env, cid: 'conv-a1' }),
    (e) => e instanceof reap.CcsReapError && e.code === 1 && /--new-conversation/.test(e.message));
  const sp = await reap.spawn('a1', ['sh', '-c', 'exec sleep 100000', 'chat'], { env, cid: 'conv-a1', newConversation: true });
  assert.strictEqual(sp.ok, true, JSON.stringify(sp));
  assert.strictEqual(sp.result, 'spawned', JSON.stringify(sp));
  assert.strictEqual((await reap.spawn('a1', ['sh', '-c', 'exec sleep 100000', 'chat'], { env })).result, 'exists');
  assert.strictEqual(await reap.turnBegin('a1', { env }), 'go');
  const during = await reap.status({ env });
  assert.ok(typeof during === 'object' && during !== null, 'status is parsed JSON');
  assert.ok(JSON.stringify(during).includes('ccs-a1'), JSON.stringify(during));
  assert.strictEqual(await reap.turnEnd('a1', { env }), 'ended');
  // Bad input: rejected with the binary's exit code and message, nothing thrown synchronously.
  await assert.rejects(reap.turnBegin('bad id!', { env }), (e) => e instanceof reap.CcsReapError && e.code === 1 && e.message.length > 0);
  // spawn with no command replays a tombstone's; with none to replay, the binary says so.
  await assert.rejects(reap.spawn('a2', [], { env }), (e) => e instanceof reap.CcsReapError && e.code === 1);
  await assert.rejects(reap.spawn('a2', 'sh', { env }), TypeError);
  // room: nothing to free without a limit; a limit of one live chat with only a busy one left: no room (5).
  const made = await reap.room({ env, need: '1M' });
  assert.strictEqual(made.ok, true, JSON.stringify(made));
  assert.deepStrictEqual(made.freed, []);
  await reap.turnBegin('a1', { env });
  const none = await reap.room({ env: { ...env, CCS_ENGINE_MAX_LIVE: '1' } });
  assert.strictEqual(none.ok, false, JSON.stringify(none));
  assert.strictEqual(none.exit, 5);
  assert.strictEqual(none.plan.left.busy, 1, JSON.stringify(none));
  await assert.rejects(reap.spawn('a3', ['sh', '-c', 'exec sleep 100000'], { env: { ...env, CCS_ENGINE_MAX_LIVE: '1' }, newConversation: true }),
    (e) => e instanceof reap.CcsReapError && e.code === 5);
  await reap.turnEnd('a1', { env });
  await assert.rejects(reap.room({ env, need: 'lots' }), (e) => e instanceof reap.CcsReapError && e.code === 2);
  const r = await reap.run(['--version'], { env });
  assert.strictEqual(r.code, 0);
  assert.match(r.stdout, /^ccs-reap \d+\.\d+\.\d+ /);

  // Every other command, typed. A chat of an agent (the fake claude), reaped, brought back.
  const claude = process.env.FAKE_CLAUDE;
  assert.strictEqual((await reap.spawn('b1', [claude], { env, cid: 'conv-b1' })).result, 'spawned');
  assert.strictEqual(await reap.pin('b1', { env }), 'pinned');
  assert.strictEqual(await reap.unpin('b1', { env }), 'unpinned');
  assert.strictEqual(await reap.pin('nosuch', { env }), 'gone');
  const cfg = await reap.config({ env });
  assert.strictEqual(cfg.ok, true);
  assert.strictEqual(cfg.tmux_socket, fs.realpathSync(path.dirname(process.env.SOCK)) + '/' + path.basename(process.env.SOCK));
  const doc = await reap.doctor({ env });
  assert.ok(typeof doc.ok === 'boolean' && Array.isArray(doc.checks), JSON.stringify(doc));
  const ev = reap.events({ env, fromStart: true });
  const line = await reap.reap('b1', { env, force: true });
  assert.strictEqual(line.outcome, 'reaped', JSON.stringify(line));
  assert.strictEqual(line.session, 'ccs-b1');
  for await (const e of ev) {
    if (e.session === 'ccs-b1' && e.outcome === 'reaped') break;
  }
  await ev.close();
  await assert.rejects(reap.reap('nosuch', { env }), (e) => e instanceof reap.CcsReapError && e.code === 1);
  const back = await reap.spawn('b1', [], { env });
  assert.strictEqual(back.result, 'spawned', JSON.stringify(back));
  const res = await reap.resume('b1', { env });
  assert.strictEqual(res.result, 'live', JSON.stringify(res));
  assert.ok(res.attach.includes('attach'), JSON.stringify(res));
  await reap.reap('b1', { env, force: true });
  assert.strictEqual((await reap.forget('b1', { env })).result, 'forgotten');
  await assert.rejects(reap.resume('b1', { env }), (e) => e instanceof reap.CcsReapError && e.code === 1);

  // Flag-like ids (valid chat ids: A-Z a-z 0-9 _ -) are ids, never flags: no session yet is
  // 'respawn', never the help's exit 0 read as 'go'.
  for (const id of ['-h', '--help', '-V', '--version', '--json']) {
    assert.strictEqual(await reap.turnBegin(id, { env }), 'respawn', `turnBegin(${id})`);
    assert.strictEqual(await reap.turnEnd(id, { env }), 'respawn', `turnEnd(${id})`);
  }
  const sh = await reap.spawn('-h', ['sh', '-c', 'exec sleep 100000', 'chat'], { env, cid: 'conv-h', newConversation: true });
  assert.strictEqual(sh.result, 'spawned', JSON.stringify(sh));
  assert.strictEqual(sh.session, '-h', JSON.stringify(sh));
  assert.strictEqual(await reap.turnBegin('-h', { env }), 'go');
  assert.strictEqual(await reap.turnEnd('-h', { env }), 'ended');
  const listed = await reap.status({ env });
  assert.ok(JSON.stringify(listed).includes('ccs--h'), JSON.stringify(listed));
  // A flag-like --cid or --cwd value is that value, refused as such: no session made.
  await assert.rejects(reap.spawn('b1', ['sh', '-c', 'exec sleep 100000'], { env, cid: '--help' }),
    (e) => e instanceof reap.CcsReapError && e.code === 1 && /conversation id "--help"/.test(e.message));
  await assert.rejects(reap.spawn('b1', ['sh', '-c', 'exec sleep 100000'], { env, sessionCwd: '--help' }),
    (e) => e instanceof reap.CcsReapError && e.code === 1 && /--help/.test(e.message));
  assert.strictEqual(await reap.turnBegin('b1', { env }), 'respawn');

  // No call blocks the event loop: nothing synchronous but the spawn. process.report.getReport()
  // (how the libc was once told) blocks it for 4-19 ms, per call: never called.
  let reports = 0;
  const getReport = process.report.getReport;
  process.report.getReport = (...a) => {
    reports += 1;
    return getReport.apply(process.report, a);
  };
  const sync = [];
  for (let i = 0; i < 5; i++) {
    const t0 = process.hrtime.bigint();
    const p = reap.turnBegin('a1', { env });
    sync.push(Number(process.hrtime.bigint() - t0) / 1e6);
    await p;
  }
  process.report.getReport = getReport;
  assert.strictEqual(reports, 0, 'process.report.getReport() was called: it blocks the event loop');
  sync.sort((a, b) => a - b);
  const worst = sync[2];
  console.log(
    'api.test.js: binaryPath, CCS_REAP_BINARY, turnBegin/turnEnd/spawn/status/run, ' +
      `resume/forget/reap/pin/unpin/doctor/config/events: ok (a call blocks the loop ${worst.toFixed(1)} ms)`
  );
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
