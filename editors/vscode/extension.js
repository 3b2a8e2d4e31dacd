// The FEM extension: starts `fems2py lsp` and connects VS Code to it.
//
// It is a small Language Server Protocol client written against VS Code's own API, so the
// folder works as it is (no npm install, no build step): copy it into ~/.vscode/extensions/.
// It speaks JSON-RPC over the server's stdio, keeps the server told of every open .fems file,
// shows the published diagnostics and forwards definition, references, rename, hover,
// completion and outline requests.
"use strict";

const vscode = require("vscode");
const { spawn } = require("child_process");

class Connection {
  constructor(command, args, output) {
    this.nextId = 1;
    this.pending = new Map();
    this.handlers = new Map();
    this.buffer = Buffer.alloc(0);
    this.output = output;
    this.process = spawn(command, args, { stdio: ["pipe", "pipe", "pipe"] });
    this.process.stdout.on("data", (chunk) => this.receive(chunk));
    this.process.stderr.on("data", (chunk) => output.append(chunk.toString()));
    this.process.on("error", (error) =>
      vscode.window.showErrorMessage(
        `FEM: could not start '${command}' (${error.message}). Install it with ` +
          "pip install 'fems2py[lsp]' or set fems.server.command."
      )
    );
  }

  receive(chunk) {
    this.buffer = Buffer.concat([this.buffer, chunk]);
    for (;;) {
      const headerEnd = this.buffer.indexOf("\r\n\r\n");
      if (headerEnd < 0) return;
      const header = this.buffer.slice(0, headerEnd).toString("ascii");
      const length = Number(/Content-Length: *(\d+)/i.exec(header)[1]);
      const start = headerEnd + 4;
      if (this.buffer.length < start + length) return;
      const message = JSON.parse(this.buffer.slice(start, start + length).toString("utf8"));
      this.buffer = this.buffer.slice(start + length);
      this.dispatch(message);
    }
  }

  dispatch(message) {
    if (message.id !== undefined && this.pending.has(message.id)) {
      const { resolve, reject } = this.pending.get(message.id);
      this.pending.delete(message.id);
      if (message.error) reject(new Error(message.error.message));
      else resolve(message.result);
    } else if (message.method && this.handlers.has(message.method)) {
      this.handlers.get(message.method)(message.params);
    }
  }

  send(message) {
    const body = Buffer.from(JSON.stringify({ jsonrpc: "2.0", ...message }), "utf8");
    this.process.stdin.write(`Content-Length: ${body.length}\r\n\r\n`);
    this.process.stdin.write(body);
  }

  request(method, params) {
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this.send({ id, method, params });
    });
  }

  notify(method, params) {
    this.send({ method, params });
  }

  onNotification(method, handler) {
    this.handlers.set(method, handler);
  }
}

// ------------------------------------------------------------------ conversions

const toPosition = (p) => new vscode.Position(p.line, p.character);
const toRange = (r) => new vscode.Range(toPosition(r.start), toPosition(r.end));
const toLocation = (l) => new vscode.Location(vscode.Uri.parse(l.uri), toRange(l.range));
const where = (document, position) => ({
  textDocument: { uri: document.uri.toString() },
  position: { line: position.line, character: position.character },
});

function toSymbol(s) {
  const symbol = new vscode.DocumentSymbol(
    s.name,
    "",
    s.kind - 1, // LSP's SymbolKind counts from 1, VS Code's from 0
    toRange(s.range),
    toRange(s.selectionRange)
  );
  symbol.children = (s.children || []).map(toSymbol);
  return symbol;
}

// ------------------------------------------------------------------ activation

async function activate(context) {
  const output = vscode.window.createOutputChannel("FEM language server");
  const [command, ...args] = vscode.workspace
    .getConfiguration("fems")
    .get("server.command", ["fems2py", "lsp"]);
  const server = new Connection(command, args, output);
  const diagnostics = vscode.languages.createDiagnosticCollection("fems");
  context.subscriptions.push(output, diagnostics, { dispose: () => server.process.kill() });

  server.onNotification("textDocument/publishDiagnostics", (params) => {
    diagnostics.set(
      vscode.Uri.parse(params.uri),
      params.diagnostics.map((d) => {
        const shown = new vscode.Diagnostic(toRange(d.range), d.message, d.severity - 1);
        shown.source = d.source;
        return shown;
      })
    );
  });
  server.onNotification("window/logMessage", (params) => output.appendLine(params.message));

  await server.request("initialize", {
    processId: process.pid,
    rootUri: null,
    capabilities: {},
  });
  server.notify("initialized", {});

  const isFems = (document) => document.languageId === "fems";
  const opened = (document) => {
    if (!isFems(document)) return;
    server.notify("textDocument/didOpen", {
      textDocument: {
        uri: document.uri.toString(),
        languageId: "fems",
        version: document.version,
        text: document.getText(),
      },
    });
  };
  vscode.workspace.textDocuments.forEach(opened);
  context.subscriptions.push(
    vscode.workspace.onDidOpenTextDocument(opened),
    vscode.workspace.onDidChangeTextDocument((event) => {
      if (!isFems(event.document)) return;
      server.notify("textDocument/didChange", {
        textDocument: { uri: event.document.uri.toString(), version: event.document.version },
        contentChanges: [{ text: event.document.getText() }],
      });
    }),
    vscode.workspace.onDidSaveTextDocument((document) => {
      if (isFems(document)) {
        server.notify("textDocument/didSave", { textDocument: { uri: document.uri.toString() } });
      }
    }),
    vscode.workspace.onDidCloseTextDocument((document) => {
      if (isFems(document)) {
        server.notify("textDocument/didClose", { textDocument: { uri: document.uri.toString() } });
      }
    })
  );

  const selector = { language: "fems" };
  context.subscriptions.push(
    vscode.languages.registerDefinitionProvider(selector, {
      async provideDefinition(document, position) {
        const found = await server.request("textDocument/definition", where(document, position));
        return found ? toLocation(found) : null;
      },
    }),
    vscode.languages.registerReferenceProvider(selector, {
      async provideReferences(document, position, context) {
        const params = { ...where(document, position), context };
        return ((await server.request("textDocument/references", params)) || []).map(toLocation);
      },
    }),
    vscode.languages.registerRenameProvider(selector, {
      async prepareRename(document, position) {
        const range = await server.request("textDocument/prepareRename", where(document, position));
        if (!range) throw new Error("only actions, modules, variables, actors and nodes can be renamed");
        return toRange(range);
      },
      async provideRenameEdits(document, position, newName) {
        const params = { ...where(document, position), newName };
        const edit = await server.request("textDocument/rename", params);
        const result = new vscode.WorkspaceEdit();
        for (const [uri, edits] of Object.entries((edit && edit.changes) || {})) {
          for (const e of edits) result.replace(vscode.Uri.parse(uri), toRange(e.range), e.newText);
        }
        return result;
      },
    }),
    vscode.languages.registerHoverProvider(selector, {
      async provideHover(document, position) {
        const found = await server.request("textDocument/hover", where(document, position));
        if (!found) return null;
        return new vscode.Hover(new vscode.MarkdownString(found.contents.value), toRange(found.range));
      },
    }),
    vscode.languages.registerCompletionItemProvider(
      selector,
      {
        async provideCompletionItems(document, position) {
          const found = await server.request("textDocument/completion", where(document, position));
          return ((found && found.items) || []).map((item) => {
            const shown = new vscode.CompletionItem(item.label, (item.kind || 1) - 1);
            shown.detail = item.detail;
            shown.insertText = item.insertText || item.label;
            return shown;
          });
        },
      },
      "@", "{", ">", "&", "(", "["
    ),
    vscode.languages.registerDocumentSymbolProvider(selector, {
      async provideDocumentSymbols(document) {
        const params = { textDocument: { uri: document.uri.toString() } };
        return ((await server.request("textDocument/documentSymbol", params)) || []).map(toSymbol);
      },
    })
  );
}

function deactivate() {}

module.exports = { activate, deactivate };
