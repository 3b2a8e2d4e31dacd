// The TextMate grammar reads every FEM script of the repository without an `invalid` scope:
// the grammar VS Code and other TextMate editors use, tokenized by VS Code's own engine
// (vscode-textmate on the Oniguruma regular expressions VS Code ships).
"use strict";

const assert = require("node:assert");
const fs = require("node:fs");
const path = require("node:path");
const test = require("node:test");
const oniguruma = require("vscode-oniguruma");
const textmate = require("vscode-textmate");

const EXTENSION = path.resolve(__dirname, "..");
const REPOSITORY = path.resolve(EXTENSION, "..", "..");
const SCRIPT_FOLDERS = ["examples", "docs", "golden"];

function scripts(folder) {
  const found = [];
  for (const entry of fs.readdirSync(folder, { withFileTypes: true })) {
    const full = path.join(folder, entry.name);
    if (entry.isDirectory() && entry.name !== "node_modules") found.push(...scripts(full));
    else if (entry.isFile() && entry.name.endsWith(".fems")) found.push(full);
  }
  return found;
}

async function loadGrammar() {
  const wasm = fs.readFileSync(require.resolve("vscode-oniguruma/release/onig.wasm"));
  await oniguruma.loadWASM(wasm.buffer.slice(wasm.byteOffset, wasm.byteOffset + wasm.byteLength));
  const registry = new textmate.Registry({
    onigLib: Promise.resolve({
      createOnigScanner: (sources) => new oniguruma.OnigScanner(sources),
      createOnigString: (text) => new oniguruma.OnigString(text),
    }),
    loadGrammar: async () => {
      const file = path.join(EXTENSION, "syntaxes", "fems.tmLanguage.json");
      return textmate.parseRawGrammar(fs.readFileSync(file, "utf8"), file);
    },
  });
  return registry.loadGrammar("source.fems");
}

/** Every `invalid` token of a script, as `file:line:column scope "text"`. */
function invalidTokens(grammar, file) {
  const problems = [];
  let state = textmate.INITIAL;
  const lines = fs.readFileSync(file, "utf8").split(/\r?\n/);
  lines.forEach((line, index) => {
    const result = grammar.tokenizeLine(line, state);
    for (const token of result.tokens) {
      const invalid = token.scopes.find((scope) => scope.startsWith("invalid"));
      if (invalid) {
        const text = line.slice(token.startIndex, token.endIndex);
        problems.push(`${file}:${index + 1}:${token.startIndex + 1} ${invalid} ${JSON.stringify(text)}`);
      }
    }
    state = result.ruleStack;
  });
  return problems;
}

test("every FEM script of the repository tokenizes without an invalid scope", async () => {
  const grammar = await loadGrammar();
  const files = SCRIPT_FOLDERS.flatMap((folder) => scripts(path.join(REPOSITORY, folder)));
  assert.ok(files.length >= 10, `only ${files.length} scripts found`);
  const problems = files.flatMap((file) => invalidTokens(grammar, file));
  assert.deepStrictEqual(problems, []);
});

test("a misspelt block header is marked invalid, so the check is not vacuous", async () => {
  const grammar = await loadGrammar();
  const file = path.join(require("node:os").tmpdir(), `fems-grammar-${process.pid}.fems`);
  fs.writeFileSync(file, "varz:\n    x = 1\n");
  try {
    const problems = invalidTokens(grammar, file);
    assert.strictEqual(problems.length, 1);
    assert.match(problems[0], /:1:1 invalid\.illegal\.unknown-block\.fems "varz"$/);
  } finally {
    fs.unlinkSync(file);
  }
});
