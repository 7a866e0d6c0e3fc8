/**
 * CDI's names (SPEC.md, "Fully qualified device name"): `vendor.com/class=name`, where the kind
 * `vendor.com/class` says whose devices and what sort, and the name which one. The characters
 * allowed are the spec's own, so a name berth accepts is one every CDI tool reads the same way.
 */

export interface QualifiedName {
  /** `vendor.com/class`. */
  kind: string;
  name: string;
}

const VENDOR = /^[A-Za-z](?:[A-Za-z0-9_.-]*[A-Za-z0-9])?$/;
const CLASS = /^[A-Za-z](?:[A-Za-z0-9_-]*[A-Za-z0-9])?$/;
const NAME = /^[A-Za-z0-9](?:[A-Za-z0-9_.:-]*[A-Za-z0-9])?$/;

/** The kind's parts, or why it is not one. */
export function parseKind(kind: string): { vendor: string; class: string } | string {
  const slash = kind.indexOf('/');
  if (slash < 0) return `${JSON.stringify(kind)} is not vendor.com/class`;
  const vendor = kind.slice(0, slash);
  const cls = kind.slice(slash + 1);
  if (!VENDOR.test(vendor)) return `vendor ${JSON.stringify(vendor)} is not a name like vendor.com`;
  if (!CLASS.test(cls)) return `class ${JSON.stringify(cls)} holds other than letters, digits, - and _`;
  return { vendor, class: cls };
}

/** Why `name` is no device name, or null. */
export function checkDeviceName(name: string): string | null {
  return NAME.test(name)
    ? null
    : `${JSON.stringify(name)} is not a device name (letters, digits, -, _, . and :, starting and ending with a letter or digit)`;
}

/** `text` as a qualified name, or why it is not one. */
export function parseQualifiedName(text: string): QualifiedName | string {
  const eq = text.indexOf('=');
  if (eq < 0) return `${JSON.stringify(text)} is not a qualified CDI device name (vendor.com/class=name)`;
  const kind = text.slice(0, eq);
  const name = text.slice(eq + 1);
  const parsed = parseKind(kind);
  if (typeof parsed === 'string') return `${JSON.stringify(text)}: ${parsed}`;
  const problem = checkDeviceName(name);
  if (problem) return `${JSON.stringify(text)}: ${problem}`;
  return { kind, name };
}
