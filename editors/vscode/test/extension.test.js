// src/extension.js on activation: the language server it asks vscode-languageclient to start
// (`fems2py lsp`, or the setting fems.server.command, as a plain command line: a `transport`
// would make the client add `--stdio`, which `fems2py lsp` refuses), and the error it shows when
// the server does not start. The client is a recording stand-in, `vscode` the tests' stand-in.
"use strict";

const assert = require("node:assert");
const test = require("node:test");

const { standIn } = require("./vscode-stand-in");
standIn.useStandIn();

/** What the extension asked of the language client; `reset` starts a test afresh. */
const clients = {
  reset(startError) {
    this.created = []; // { id, name, serverOptions, clientOptions }
    this.startError = startError;
  },
};
clients.reset();

class LanguageClient {
  constructor(id, name, serverOptions, clientOptions) {
    clients.created.push({ id, name, serverOptions, clientOptions });
  }

  start() {
    return clients.startError ? Promise.reject(clients.startError) : Promise.resolve();
  }

  stop() {
    return Promise.resolve();
  }
}

const languageClient = require.resolve("vscode-languageclient/node");
const TransportKind = { stdio: 0, ipc: 1, pipe: 2, socket: 3 };
require.cache[languageClient] = {
  id: languageClient,
  filename: languageClient,
  loaded: true,
  exports: { LanguageClient, TransportKind },
};
const extension = require("../src/extension");

const { state } = standIn;

test.beforeEach(() => {
  state.reset();
  clients.reset();
});

test("the language server is `fems2py lsp`, started with no --stdio", async () => {
  const context = { subscriptions: [] };
  await extension.activate(context);
  assert.strictEqual(clients.created.length, 1);
  const [{ id, serverOptions, clientOptions }] = clients.created;
  assert.strictEqual(id, "fems");
  for (const mode of ["run", "debug"]) {
    assert.deepStrictEqual(serverOptions[mode], { command: "fems2py", args: ["lsp"] }, mode);
  }
  assert.deepStrictEqual(
    clientOptions.documentSelector.map((selector) => selector.language),
    ["fems", "fems"],
  );
  assert.deepStrictEqual(state.errors, []);
  assert.ok(context.subscriptions.length > 0);
});

test("fems.server.command names the server's command line", async () => {
  state.settings["fems.server.command"] = ["/venv/bin/fems2py", "lsp"];
  await extension.activate({ subscriptions: [] });
  assert.deepStrictEqual(clients.created[0].serverOptions.run, {
    command: "/venv/bin/fems2py",
    args: ["lsp"],
  });
});

test("a server that does not start is reported, and the debugger is registered all the same", async () => {
  clients.reset(new Error("spawn fems2py ENOENT"));
  await extension.activate({ subscriptions: [] });
  assert.strictEqual(state.errors.length, 1);
  assert.match(state.errors[0], /could not start 'fems2py' \(spawn fems2py ENOENT\)/);
  assert.match(state.errors[0], /fems\.server\.command/);
  assert.ok(state.commands.has("fems.debugScript"));
});
