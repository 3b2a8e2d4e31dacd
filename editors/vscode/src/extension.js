// The FEM extension: starts `fems2py lsp` and connects VS Code to it through the ecosystem's
// Language Server Protocol client, vscode-languageclient. Diagnostics, definition, references,
// rename, hover, completion and the outline are the server's; the client forwards them all.
"use strict";

const vscode = require("vscode");
const { LanguageClient, TransportKind } = require("vscode-languageclient/node");

let client;

/** The command that starts the server: `fems.server.command`, else `fems2py lsp`. */
function serverCommand() {
  const [command, ...args] = vscode.workspace
    .getConfiguration("fems")
    .get("server.command", ["fems2py", "lsp"]);
  return { command, args, transport: TransportKind.stdio };
}

async function activate(context) {
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
    vscode.window.showErrorMessage(
      `FEM: could not start '${server.command}' (${error.message}). Install it with ` +
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
