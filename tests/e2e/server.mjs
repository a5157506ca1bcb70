// Starts `tessera serve --port 0` as a child process for the e2e scripts:
// the port from stderr's "listening on http://HOST:PORT", then /health 200;
// stop() sends SIGTERM and fails unless the server exits with code 0.
import { spawn } from 'node:child_process';

// What the runner (tests/e2e/run.sh) passes in; a script run by hand needs the same.
export function env(name) {
  const v = process.env[name];
  if (!v) fail(`environment variable ${name} is not set (run this through ctest or tests/e2e/run.sh)`);
  return v;
}

process.on('unhandledRejection', (e) => fail(`unhandled rejection: ${e?.stack ?? e}`));

export function fail(message) {
  console.error(`FAIL: ${message}`);
  process.exit(1);
}

export function check(cond, message) {
  if (!cond) throw new Error(message);
}

// For the scripts' own requests: the server's SIGTERM waits out idle
// keep-alive connections (cpp-httplib), which would add seconds to each test.
export const kClose = { Connection: 'close' };

export async function startServer(args = [], { timeoutMs = 30000 } = {}) {
  const bin = env('TESSERA_BIN');
  const model = env('TESSERA_MODEL');
  const argv = ['serve', '--port', '0', '-m', model, ...args];
  const child = spawn(bin, argv, { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  let exited = null;
  const exit = new Promise((resolve) => {
    child.on('exit', (code, signal) => {
      exited = { code, signal };
      resolve(exited);
    });
  });
  const port = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`tessera serve did not listen within ${timeoutMs} ms:\n${log}`)), timeoutMs);
    child.on('error', (e) => reject(new Error(`cannot start ${bin}: ${e.message}`)));
    child.stderr.on('data', (d) => {
      log += d;
      const m = /listening on http:\/\/[^:\s]+:(\d+)/.exec(log);
      if (m) {
        clearTimeout(timer);
        resolve(Number(m[1]));
      }
    });
    exit.then(({ code, signal }) => reject(new Error(`tessera serve exited (code ${code}, signal ${signal}) before listening:\n${log}`)));
  });
  const base = `http://127.0.0.1:${port}`;
  const keyAt = args.indexOf('--api-key');
  const key = keyAt >= 0 ? args[keyAt + 1] : '';
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (exited) throw new Error(`tessera serve exited (code ${exited.code}) while loading:\n${log}`);
    try {
      const r = await fetch(`${base}/health`, { headers: kClose });
      if (r.status === 200) break;
    } catch {
      // not answering yet
    }
    if (Date.now() > deadline) throw new Error(`tessera serve never answered /health 200:\n${log}`);
    await new Promise((r) => setTimeout(r, 20));
  }
  return {
    port,
    base,
    key,
    log: () => log,
    // SIGTERM, then the exit code must be 0 within `ms`.
    async stop(ms = 20000) {
      if (!exited) child.kill('SIGTERM');
      let timer;
      const result = await Promise.race([exit, new Promise((r) => { timer = setTimeout(() => r(null), ms); })]);
      clearTimeout(timer);
      if (!result) {
        child.kill('SIGKILL');
        throw new Error(`tessera serve did not exit within ${ms} ms of SIGTERM:\n${log}`);
      }
      if (result.code !== 0) {
        throw new Error(`tessera serve exited with code ${result.code} (signal ${result.signal}) after SIGTERM:\n${log}`);
      }
    },
    kill() {
      if (!exited) child.kill('SIGKILL');
    },
  };
}

// A value from GET /metrics (NaN when absent); `key` for a server with --api-key.
export async function metric(server, name, key = server.key) {
  const r = await fetch(`${server.base}/metrics`, { headers: { ...kClose, ...(key ? { Authorization: `Bearer ${key}` } : {}) } });
  const m = new RegExp(`\\n${name} (\\S+)`).exec(await r.text());
  return m ? Number(m[1]) : NaN;
}

export async function waitFor(what, cond, ms = 10000) {
  const deadline = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

// Runs `body(server)` against a fresh server; any throw or a wrong exit code
// ends the process with exit code 1 (so does an unhandled rejection anywhere).
export async function withServer(args, body) {
  let server;
  try {
    server = await startServer(args);
  } catch (e) {
    fail(e.message);
  }
  try {
    await body(server);
  } catch (e) {
    server.kill();
    fail(`${e?.stack ?? e}\n--- server log ---\n${server.log()}`);
  }
  try {
    await server.stop();
  } catch (e) {
    fail(e.message);
  }
  console.log(`ok: tessera serve ${args.join(' ')} passed and exited 0 on SIGTERM`);
}
