// `stead bench guardrail-quality`'s injection peer: vard (npm @andersmyrmel/vard, MIT, pure
// JavaScript heuristics) over the labelled texts, one verdict per text.
// usage: node vard_run.mjs VARD_INDEX_JS inj.jsonl PRESET OUT.jsonl  (prints one JSON line)
import fs from "node:fs";

const [, , index, input, preset = "strict", output] = process.argv;
const { default: vard } = await import(index);
// Length is not an injection signal here: the corpus holds long jailbreaks.
const check = vard[preset]().maxLength(1_000_000);
const rows = fs.readFileSync(input, "utf8").split("\n").filter(Boolean).map(JSON.parse);
const started = performance.now();
const out = rows.map((r) => JSON.stringify({ id: r.id, flagged: !check.safeParse(r.text).safe }));
const seconds = (performance.now() - started) / 1000;
fs.writeFileSync(output, out.join("\n") + "\n");
console.log(JSON.stringify({ peer: `vard ${preset}`, texts: rows.length, seconds }));
