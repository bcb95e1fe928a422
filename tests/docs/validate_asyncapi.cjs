// Validate an AsyncAPI document with the real AsyncAPI parser (@asyncapi/parser, installed
// by infra/local/asyncapi.sh into .reventless/node/).
//   node tests/docs/validate_asyncapi.cjs FILE
// Prints one JSON object: {"valid": bool, "version": ..., "diagnostics": [{severity, code,
// message, path}]} (severity: error, warning, info, hint). Exit 0: valid (no errors);
// 1: the parser found errors; 2: the file or the parser is missing.
"use strict";
const fs = require("fs");
const path = require("path");

const root = process.env.REVENTLESS_NODE_DIR || path.join(__dirname, "..", "..", ".reventless", "node");
let Parser;
try {
  ({ Parser } = require(path.join(root, "node_modules", "@asyncapi", "parser")));
} catch (err) {
  console.error(`@asyncapi/parser is missing in ${root}: run bash infra/local/asyncapi.sh`);
  process.exit(2);
}
const file = process.argv[2];
if (!file) {
  console.error("usage: validate_asyncapi.cjs FILE");
  process.exit(2);
}
let text;
try {
  text = fs.readFileSync(file, "utf8");
} catch (err) {
  console.error(`cannot read ${file}: ${err.message}`);
  process.exit(2);
}
const SEVERITY = ["error", "warning", "info", "hint"];

(async () => {
  const parser = new Parser();
  const { document, diagnostics } = await parser.parse(text, { source: path.resolve(file) });
  const out = diagnostics.map((d) => ({
    severity: SEVERITY[d.severity] || String(d.severity),
    code: String(d.code),
    message: d.message,
    path: (d.path || []).join("/"),
  }));
  const valid = document !== undefined && !out.some((d) => d.severity === "error");
  console.log(JSON.stringify({ valid, version: document ? document.version() : null, diagnostics: out }));
  process.exit(valid ? 0 : 1);
})().catch((err) => {
  console.error(`parser crashed: ${err && err.stack ? err.stack : err}`);
  process.exit(2);
});
