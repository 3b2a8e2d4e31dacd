// The FEM extension: starts `fems2py lsp` and connects VS Code to it through the ecosystem's
// Language Server Protocol client, vscode-languageclient. Diagnostics, definition, references,
// rename, hover, completion and the outline are the server's; the client forwards them all.
// The `fems` debugger (src/debug.js) runs `fems2py debug`, the runtime's Debug Adapter Protocol
// server, in the same way.
"use strict";

const vscode = require("vscode");
const { LanguageClient } = require("vscode-languageclient/node");
const { registerDebugger } = require("./debug");

/** @type {LanguageClient | undefined} */
let client;

/**
 * The command that starts the server: `fems.server.command`, else `fems2py lsp`. It has no
 * `transport`: the client talks over the server's stdin and stdout all the same, and with
 * `TransportKind.stdio` it would add `--stdio` to the command line, which `fems2py lsp` refuses.
 */
function serverCommand() {
  const [command, ...args] = vscode.workspace
    .getConfiguration("fems")
    .get("server.command", ["fems2py", "lsp"]);
  return { command, args };
}

/** @param {vscode.ExtensionContext} context */
async function activate(context) {
  registerDebugger(context); // debugging needs no language server, so it comes first
  const server = serverCommand();
  client = new LanguageClient(
    "fems",
    "FEM language server",
    { run: server, debug: server },
    {
      documentSelector: [{ scheme: "file", language: "fems" }, { scheme: "untitled", language: "fems" }],
      synchronize: { configurationSection: "fems" },
    }
  );
  try {
    await client.start();
  } catch (error) {
    const reason = error instanceof Error ? error.message : String(error);
    vscode.window.showErrorMessage(
      `FEM: could not start '${server.command}' (${reason}). Install it with ` +
        "pip install 'fems2py[lsp]' or set fems.server.command."
    );
    return;
  }
  context.subscriptions.push(client);
}

function deactivate() {
  return client ? client.stop() : undefined;
}

module.exports = { activate, deactivate };
