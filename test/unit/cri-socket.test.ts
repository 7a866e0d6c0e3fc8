/** The CRI socket is never reachable by other users, not even between bind and chmod. */
import assert from 'node:assert/strict';
import { mkdir, mkdtemp, readdir, rm, stat } from 'node:fs/promises';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { after, describe, it } from 'node:test';
import { bindPrivately } from '../../src/cri/server.js';

describe('bindPrivately', () => {
  const servers: Server[] = [];
  let base = '';

  after(async () => {
    for (const server of servers) server.close();
    if (base) await rm(base, { recursive: true, force: true });
  });

  async function listen(path: string): Promise<void> {
    const server = createServer();
    servers.push(server);
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(path, () => resolve());
    });
  }

  it('binds where only the owner can reach, then moves the socket into place with mode 0660', async () => {
    base = await mkdtemp(join(tmpdir(), 'berth-sock-'));
    const dir = join(base, 'run');
    // The socket's own directory is world-searchable, as /run/berth is (0711).
    await mkdir(dir, { mode: 0o711 });
    const socket = join(dir, 'berth.sock');
    // A leftover of a berthd killed mid-bind goes.
    await mkdir(join(dir, '.bAbC123'));
    const previous = process.umask(0);
    let parentModeAtBind = -1;
    try {
      await bindPrivately(socket, async (path) => {
        parentModeAtBind = (await stat(dirname(path))).mode & 0o777;
        await listen(path);
      });
    } finally {
      process.umask(previous);
    }
    assert.equal(parentModeAtBind & 0o077, 0, `bound in a directory of mode ${parentModeAtBind.toString(8)}`);
    const st = await stat(socket);
    assert.ok(st.isSocket());
    assert.equal(st.mode & 0o777, 0o660);
    assert.deepEqual(await readdir(dir), ['berth.sock']);
  });
});
