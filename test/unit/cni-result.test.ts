import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { podIps, type CniResult } from '../../src/cni/index.js';
import { validateCniResult } from '../../src/cni/result.js';

/** What bridge (1.0.0) returns: host bridge, host veth, then the sandbox interface. */
function bridgeResult(ips: CniResult['ips']): CniResult {
  return {
    cniVersion: '1.0.0',
    interfaces: [
      { name: 'cni0', mac: 'aa:bb:cc:dd:ee:01' },
      { name: 'veth1234', mac: 'aa:bb:cc:dd:ee:02' },
      { name: 'eth0', mac: 'aa:bb:cc:dd:ee:03', sandbox: '/var/run/netns/x' },
    ],
    ips,
    routes: [{ dst: '0.0.0.0/0' }],
    dns: {},
  };
}

describe('podIps', () => {
  test('single IPv4 (1.0.0 shape)', () => {
    const r = bridgeResult([{ address: '10.88.0.5/16', gateway: '10.88.0.1', interface: 2 }]);
    assert.deepEqual(podIps(r, 'eth0'), { ip: '10.88.0.5', additionalIps: [] });
  });

  test('single IPv6', () => {
    const r = bridgeResult([{ address: 'fd00:10::5/64', gateway: 'fd00:10::1', interface: 2 }]);
    assert.deepEqual(podIps(r, 'eth0'), { ip: 'fd00:10::5', additionalIps: [] });
  });

  test('dual stack: IPv4 is primary even when listed after IPv6', () => {
    const r = bridgeResult([
      { address: 'fd00:10::5/64', interface: 2 },
      { address: '10.88.0.5/16', interface: 2 },
      { address: 'fd00:10::6/64', interface: 2 },
    ]);
    assert.deepEqual(podIps(r, 'eth0'), { ip: '10.88.0.5', additionalIps: ['fd00:10::5', 'fd00:10::6'] });
  });

  test('0.3.1 shape with version fields', () => {
    const r: CniResult = {
      cniVersion: '0.3.1',
      interfaces: [
        { name: 'cni0', mac: 'aa:bb:cc:dd:ee:01' },
        { name: 'eth0', mac: 'aa:bb:cc:dd:ee:03', sandbox: '/proc/42/ns/net' },
      ],
      ips: [
        { version: '6', address: '2001:db8::7/64', interface: 1 },
        { version: '4', address: '192.168.5.7/24', gateway: '192.168.5.1', interface: 1 },
      ],
    };
    assert.deepEqual(podIps(r, 'eth0'), { ip: '192.168.5.7', additionalIps: ['2001:db8::7'] });
  });

  test('prefers addresses on the sandbox interface named ifName', () => {
    const r = bridgeResult([
      { address: '10.88.0.1/16', interface: 0 }, // host bridge address: not the pod's
      { address: '10.88.0.5/16', interface: 2 },
    ]);
    assert.deepEqual(podIps(r, 'eth0'), { ip: '10.88.0.5', additionalIps: [] });
  });

  test('a host-side interface with the same name does not count as the sandbox one', () => {
    const r: CniResult = {
      cniVersion: '1.0.0',
      interfaces: [{ name: 'eth0' }, { name: 'eth0', sandbox: '/run/netns/p' }],
      ips: [
        { address: '172.16.0.1/24', interface: 0 },
        { address: '172.16.0.9/24', interface: 1 },
      ],
    };
    assert.deepEqual(podIps(r, 'eth0'), { ip: '172.16.0.9', additionalIps: [] });
  });

  test('falls back to all addresses without usable interface indexes', () => {
    const noIndex: CniResult = {
      cniVersion: '1.0.0',
      ips: [{ address: '10.1.0.4/24' }, { address: 'fd00::4/64' }],
    };
    assert.deepEqual(podIps(noIndex, 'eth0'), { ip: '10.1.0.4', additionalIps: ['fd00::4'] });
    const otherName = bridgeResult([{ address: '10.88.0.5/16', interface: 2 }]);
    assert.deepEqual(podIps(otherName, 'net1'), { ip: '10.88.0.5', additionalIps: [] });
    const outOfRange = bridgeResult([{ address: '10.88.0.5/16', interface: 9 }]);
    assert.deepEqual(podIps(outOfRange, 'eth0'), { ip: '10.88.0.5', additionalIps: [] });
  });

  test('no addresses, duplicates and garbage', () => {
    assert.deepEqual(podIps({ cniVersion: '1.0.0' }, 'eth0'), { ip: '', additionalIps: [] });
    const r = bridgeResult([
      { address: '10.88.0.5/16', interface: 2 },
      { address: '10.88.0.5/16', interface: 2 },
      { address: 'not-an-ip/8', interface: 2 },
    ]);
    assert.deepEqual(podIps(r, 'eth0'), { ip: '10.88.0.5', additionalIps: [] });
  });
});

describe('validateCniResult', () => {
  test('accepts real plugin output, keeps unknown fields, drops Go nulls', () => {
    const raw: unknown = JSON.parse(
      '{"cniVersion":"1.0.0","interfaces":[{"name":"lo","mac":"00:00:00:00:00:00","sandbox":"/run/netns/x"}],' +
        '"ips":[{"interface":0,"address":"127.0.0.1/8"}],"routes":null,"dns":{},"x-extra":1}',
    );
    const r = validateCniResult(raw, '1.0.0');
    assert.equal(r.interfaces?.[0]?.name, 'lo');
    assert.equal('routes' in r, false);
    assert.equal((r as unknown as Record<string, unknown>)['x-extra'], 1);
  });

  test('fills a missing cniVersion from the request', () => {
    assert.equal(validateCniResult({ ips: [] }, '0.4.0').cniVersion, '0.4.0');
  });

  test('rejects malformed results with the bad field named', () => {
    assert.throws(() => validateCniResult('x', '1.0.0'), /not a JSON object/);
    assert.throws(() => validateCniResult({ ips: {} }, '1.0.0'), /ips is not an array/);
    assert.throws(() => validateCniResult({ ips: [{}] }, '1.0.0'), /ips\[0\]\.address/);
    assert.throws(
      () => validateCniResult({ ips: [{ address: '1.2.3.4/32', interface: 'eth0' }] }, '1.0.0'),
      /interface/,
    );
    assert.throws(() => validateCniResult({ interfaces: [{}] }, '1.0.0'), /interfaces\[0\]\.name/);
    assert.throws(() => validateCniResult({ routes: [{ gw: '1.1.1.1' }] }, '1.0.0'), /routes\[0\]\.dst/);
    assert.throws(() => validateCniResult({ dns: { nameservers: 'x' } }, '1.0.0'), /dns\.nameservers/);
    assert.throws(() => validateCniResult({ cniVersion: 1 }, '1.0.0'), /cniVersion/);
  });
});
