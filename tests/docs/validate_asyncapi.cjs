// Validate an AsyncAPI document with the real AsyncAPI parser (@asyncapi/parser, installed
// by infra/local/asyncapi.sh into .reventless/node/).
//   node tests/docs/validate_asyncapi.cjs FILE [FILE...]
// Prints one line of JSON per file: {"file", "valid": bool, "version", "diagnostics":
// [{severity, code, message, path}]} (severity: error, warning, info, hint). Exit 0: all
// valid (no errors); 1: the parser found errors in one; 2: a file or the parser is missing.
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
const files = process.argv.slice(2);
if (files.length === 0) {
  console.error("usage: validate_asyncapi.cjs FILE [FILE...]");
  process.exit(2);
}
const SEVERITY = ["error", "warning", "info", "hint"];

async function check(parser, file) {
  let text;
  try {
    text = fs.readFileSync(file, "utf8");
  } catch (err) {
    console.error(`cannot read ${file}: ${err.message}`);
    process.exit(2);
  }
  const { document, diagnostics } = await parser.parse(text, { source: path.resolve(file) });
  const out = diagnostics.map((d) => ({
    severity: SEVERITY[d.severity] || String(d.severity),
    code: String(d.code),
    message: d.message,
    path: (d.path || []).join("/"),
  }));
  const valid = document !== undefined && !out.some((d) => d.severity === "error");
  const version = document ? document.version() : null;
  console.log(JSON.stringify({ file, valid, version, diagnostics: out }));
  return valid;
}

(async () => {
  const parser = new Parser();
  let all = true;
  for (const file of files) {
    all = (await check(parser, file)) && all;
  }
  process.exit(all ? 0 : 1);
})().catch((err) => {
  console.error(`parser crashed: ${err && err.stack ? err.stack : err}`);
  process.exit(2);
});
