import { isIP } from 'node:net';
import { isAbsolute } from 'node:path';
import { InvalidArgumentError } from '../errors.js';

function hasControlChar(value: string): boolean {
  for (let i = 0; i < value.length; i++) {
    const code = value.charCodeAt(i);
    if (code < 0x20 || code === 0x7f) return true;
  }
  return false;
}

/** Fields the kernel or the filesystem will see must not smuggle paths or control characters. */
export function requireString(field: string, value: string | undefined): string {
  if (!value) throw new InvalidArgumentError(field, 'is required');
  return value;
}

export function requireSafeName(field: string, value: string | undefined, maxLength = 253): string {
  const v = requireString(field, value);
  if (v.length > maxLength) throw new InvalidArgumentError(field, `is longer than ${maxLength} characters`);
  if (hasControlChar(v) || /[/\\]/.test(v) || v === '.' || v === '..') {
    throw new InvalidArgumentError(field, `"${v}" must not contain slashes or control characters`);
  }
  return v;
}

/** RFC 1123 host name, as the kernel and resolvers accept it. */
export function optionalHostname(field: string, value: string): string {
  if (!value) return '';
  if (
    value.length > 64 ||
    !/^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/i.test(value)
  ) {
    throw new InvalidArgumentError(field, `"${value}" is not a valid host name`);
  }
  return value;
}

export function optionalAbsolutePath(field: string, value: string): string {
  if (!value) return '';
  if (!isAbsolute(value) || value.split('/').includes('..') || value.includes('\0')) {
    throw new InvalidArgumentError(field, `"${value}" must be an absolute path without ".."`);
  }
  return value;
}

/** A cgroup parent is a path (cgroupfs) or a slice name (systemd); neither may climb with "..". */
export function optionalCgroupParent(field: string, value: string): string {
  if (!value) return '';
  if (value.split('/').includes('..') || hasControlChar(value)) {
    throw new InvalidArgumentError(field, `"${value}" must not contain ".." or control characters`);
  }
  return value;
}

export function int64Id(field: string, value: string): number {
  const n = Number(value);
  if (!Number.isSafeInteger(n) || n < 0 || n > 0xffffffff) {
    throw new InvalidArgumentError(field, `"${value}" is not a valid id (0 to 4294967295)`);
  }
  return n;
}

export function port(field: string, value: number): number {
  if (!Number.isInteger(value) || value < 0 || value > 65535) {
    throw new InvalidArgumentError(field, `${value} is not a port number`);
  }
  return value;
}

export function ipAddress(field: string, value: string): string {
  if (isIP(value) === 0) throw new InvalidArgumentError(field, `"${value}" is not an IP address`);
  return value;
}

/** sysctl names as in /proc/sys, dotted or slashed; nothing that could leave /proc/sys. */
export function sysctlName(field: string, value: string): string {
  if (!/^[a-zA-Z0-9_]+([./][a-zA-Z0-9_*-]+)*$/.test(value)) {
    throw new InvalidArgumentError(field, `"${value}" is not a sysctl name`);
  }
  return value;
}
