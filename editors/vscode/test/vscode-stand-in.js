// A stand-in for the `vscode` module, which exists only inside VS Code: the few parts of its API
// that src/debug.js calls, recording what the extension asks of VS Code so that a test under
// Node can check it. `require("vscode")` resolves to this file once `useStandIn()` has run.
"use strict";

const Module = require("node:module");
const path = require("node:path");

class DebugAdapterExecutable {
  constructor(command, args, options) {
    Object.assign(this, { command, args, options });
  }
}

class DebugAdapterServer {
  constructor(port, host) {
    Object.assign(this, { port, host });
  }
}

const Uri = {
  file: (fsPath) => ({ scheme: "file", fsPath, path: fsPath }),
};

/** What VS Code holds and what the extension asked of it; `reset` starts a test afresh. */
const state = {
  reset() {
    this.settings = {}; // "fems.debug.args" → value
    this.workspaceFolders = [];
    this.textDocuments = [];
    this.activeTextEditor = undefined;
    this.errors = [];
    this.providers = []; // { type, provider, triggerKind }
    this.factories = []; // { type, factory }
    this.commands = new Map();
    this.started = []; // { folder, configuration }
  },
};
state.reset();

const disposable = () => ({ dispose() {} });

const vscode = {
  DebugAdapterExecutable,
  DebugAdapterServer,
  DebugConfigurationProviderTriggerKind: { Initial: 1, Dynamic: 2 },
  Uri,
  workspace: {
    getConfiguration: (section) => ({
      get: (key, fallback) => state.settings[`${section}.${key}`] ?? fallback,
    }),
    get textDocuments() {
      return state.textDocuments;
    },
    getWorkspaceFolder: (uri) =>
      state.workspaceFolders.find((folder) => uri.fsPath.startsWith(folder.uri.fsPath + path.sep)),
  },
  window: {
    get activeTextEditor() {
      return state.activeTextEditor;
    },
    showErrorMessage: (message) => {
      state.errors.push(message);
      return Promise.resolve(undefined);
    },
  },
  debug: {
    registerDebugConfigurationProvider: (type, provider, triggerKind) => {
      state.providers.push({ type, provider, triggerKind });
      return disposable();
    },
    registerDebugAdapterDescriptorFactory: (type, factory) => {
      state.factories.push({ type, factory });
      return disposable();
    },
    startDebugging: (folder, configuration) => {
      state.started.push({ folder, configuration });
      return Promise.resolve(true);
    },
  },
  commands: {
    registerCommand: (id, handler) => {
      state.commands.set(id, handler);
      return disposable();
    },
  },
};

/** A text document of the given language, as `textDocuments` and editors hold it. */
function document(fsPath, languageId = "fems") {
  return { languageId, uri: Uri.file(fsPath) };
}

/** Makes `require("vscode")` load this stand-in, from here on in this process. */
function useStandIn() {
  const resolve = Module._resolveFilename;
  Module._resolveFilename = function (request, ...rest) {
    return request === "vscode" ? __filename : resolve.call(this, request, ...rest);
  };
}

module.exports = { ...vscode, standIn: { state, document, useStandIn } };
