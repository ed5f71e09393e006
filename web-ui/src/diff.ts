// A structural diff of two JSON values: the paths whose values differ, for the replay
// debugger's "what changed between step A and step B".

export interface Change {
  path: string;
  before: unknown;
  after: unknown;
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

export function diff(before: unknown, after: unknown, path = ""): Change[] {
  if (JSON.stringify(before) === JSON.stringify(after)) return [];
  if (isObject(before) && isObject(after)) {
    const keys = [...new Set([...Object.keys(before), ...Object.keys(after)])].sort();
    return keys.flatMap((k) => diff(before[k], after[k], path ? `${path}.${k}` : k));
  }
  if (Array.isArray(before) && Array.isArray(after)) {
    const n = Math.max(before.length, after.length);
    return Array.from({ length: n }, (_, i) => diff(before[i], after[i], `${path}[${i}]`)).flat();
  }
  return [{ path: path || "(root)", before, after }];
}
