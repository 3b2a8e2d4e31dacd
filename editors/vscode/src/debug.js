// The `fems` debugger. The Debug Adapter Protocol server is fems2py's own (`fems2py debug`, in the
// runtime): breakpoints, stepping, threads and variables are all the adapter's. This file only
// tells VS Code how to reach it: run `fems2py debug <program> <args…>` over stdio for a launch,
// connect to a run started with `--listen HOST:PORT` for an attach.
"use strict";

const path = require("node:path");
const vscode = require("vscode");

const DEBUG_TYPE = "fems";
const DEBUG_COMMAND = "fems.debugScript";
const NO_SCRIPT = "FEM: open a .fems file to debug it.";

/**
 * A `fems` launch or attach configuration, as launch.json holds it (package.json's
 * `configurationAttributes` describe the same attributes for VS Code's editor of launch.json).
 * @typedef {vscode.DebugConfiguration & {
 *   program?: string, args?: string[], cwd?: string, stopOnEntry?: boolean, fork?: string,
 *   command?: string | string[], host?: string, port?: number
 * }} FemsConfiguration
 */

/** The `fems.debug.*` settings: the command that runs fems2py, the module options to debug with. */
function debugSettings() {
  const settings = vscode.workspace.getConfiguration("fems");
  return {
    /** @type {string[]} */ command: settings.get("debug.command", ["fems2py"]),
    /** @type {string[]} */ args: settings.get("debug.args", []),
  };
}

/**
 * A launch configuration that debugs one script, run from its folder with the module options of
 * `fems.debug.args`.
 * @param {string} program the .fems file
 * @returns {FemsConfiguration}
 */
function launchConfiguration(program) {
  return {
    type: DEBUG_TYPE,
    request: "launch",
    name: `Debug ${path.basename(program)}`,
    program,
    args: debugSettings().args,
    cwd: path.dirname(program),
    stopOnEntry: false,
  };
}

/** The .fems file of the active editor, if it shows one on disk. */
function activeScript() {
  const document = vscode.window.activeTextEditor?.document;
  return document && document.languageId === "fems" && document.uri.scheme === "file"
    ? document.uri.fsPath
    : undefined;
}

/** Fills in what launch.json leaves out; refuses, with a message, what cannot run. */
class FemsConfigurationResolver {
  /**
   * @param {vscode.WorkspaceFolder | undefined} _folder
   * @param {FemsConfiguration} configuration
   * @returns {FemsConfiguration | undefined}
   */
  resolveDebugConfiguration(_folder, configuration) {
    const script = activeScript();
    // F5 with no launch.json: VS Code passes an empty configuration
    if (!configuration.type && !configuration.request && !configuration.name) {
      if (script) return launchConfiguration(script);
      vscode.window.showErrorMessage(NO_SCRIPT);
      return undefined;
    }
    if (configuration.request === "attach") {
      if (typeof configuration.port === "number") return configuration;
      vscode.window.showErrorMessage("FEM: an attach configuration needs the port of `--listen`.");
      return undefined;
    }
    const program = configuration.program || script;
    if (program) return { ...configuration, program };
    vscode.window.showErrorMessage("FEM: the launch configuration names no program (a .fems file).");
    return undefined;
  }
}

/** Offered in the Run and Debug view without a launch.json: one configuration per open script. */
class OpenScriptConfigurations {
  /** @returns {FemsConfiguration[]} */
  provideDebugConfigurations() {
    return vscode.workspace.textDocuments
      .filter((document) => document.languageId === "fems" && document.uri.scheme === "file")
      .map((document) => launchConfiguration(document.uri.fsPath));
  }
}

/** How VS Code reaches the adapter: `fems2py debug` over stdio, or a `--listen` port. */
class FemsAdapterFactory {
  /**
   * @param {vscode.DebugSession} session
   * @returns {vscode.DebugAdapterDescriptor}
   */
  createDebugAdapterDescriptor(session) {
    /** @type {FemsConfiguration} */
    const configuration = session.configuration;
    if (configuration.request === "attach") {
      return new vscode.DebugAdapterServer(Number(configuration.port), configuration.host || "127.0.0.1");
    }
    const program = String(configuration.program);
    const command = configuration.command ?? debugSettings().command;
    const [executable, ...prefix] = typeof command === "string" ? [command] : command;
    const args = [...prefix, "debug", program, ...(configuration.args ?? [])];
    const cwd = configuration.cwd || session.workspaceFolder?.uri.fsPath || path.dirname(program);
    return new vscode.DebugAdapterExecutable(executable, args, { cwd });
  }
}

/**
 * "Debug this script": from the editor's title or context menu (which pass the file's URI) or
 * the command palette (the active editor's file).
 * @param {vscode.Uri | undefined} resource
 */
async function debugScript(resource) {
  const program = resource?.scheme === "file" ? resource.fsPath : activeScript();
  if (!program) {
    vscode.window.showErrorMessage(NO_SCRIPT);
    return false;
  }
  const folder = vscode.workspace.getWorkspaceFolder(vscode.Uri.file(program));
  return vscode.debug.startDebugging(folder, launchConfiguration(program));
}

/** @param {vscode.ExtensionContext} context */
function registerDebugger(context) {
  context.subscriptions.push(
    vscode.debug.registerDebugConfigurationProvider(DEBUG_TYPE, new FemsConfigurationResolver()),
    vscode.debug.registerDebugConfigurationProvider(
      DEBUG_TYPE,
      new OpenScriptConfigurations(),
      vscode.DebugConfigurationProviderTriggerKind.Dynamic,
    ),
    vscode.debug.registerDebugAdapterDescriptorFactory(DEBUG_TYPE, new FemsAdapterFactory()),
    vscode.commands.registerCommand(DEBUG_COMMAND, debugScript),
  );
}

module.exports = {
  DEBUG_COMMAND,
  DEBUG_TYPE,
  FemsAdapterFactory,
  FemsConfigurationResolver,
  OpenScriptConfigurations,
  debugScript,
  launchConfiguration,
  registerDebugger,
};
