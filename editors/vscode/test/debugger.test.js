// The `fems` debugger as VS Code sees it: package.json's contribution (the debugger, its launch
// and attach attributes, initial configurations, snippets, breakpoints, the "Debug this script"
// command and its menus), and src/debug.js run against a stand-in for the `vscode` module: which
// command line runs the adapter, where an attach connects, what F5 and the command launch.
"use strict";

const assert = require("node:assert");
const fs = require("node:fs");
const path = require("node:path");
const test = require("node:test");

const { standIn } = require("./vscode-stand-in");
standIn.useStandIn();
const vscode = require("vscode");
const debug = require("../src/debug");

const { state, document } = standIn;
const EXTENSION = path.resolve(__dirname, "..");
const manifest = JSON.parse(fs.readFileSync(path.join(EXTENSION, "package.json"), "utf8"));
const [debuggerContribution] = manifest.contributes.debuggers;
const SCRIPT = "/games/werewolf/werewolf.fems";
const MOCK = ["--model", "fems/mock", "--seed", "1"];

test.beforeEach(() => state.reset());

// ------------------------------------------------------------------------ the contribution

/** The JSON schema types a value satisfies, for `configurationAttributes`' `type`. */
function jsonTypes(value) {
  if (Array.isArray(value)) return ["array"];
  if (Number.isInteger(value)) return ["integer", "number"];
  return [typeof value];
}

/**
 * What is wrong with a configuration by the attributes package.json declares for its request
 * (a snippet's `^"…"` strings are strings once inserted).
 */
function problems(configuration) {
  const attributes = debuggerContribution.configurationAttributes[configuration.request];
  if (!attributes) return [`unknown request ${configuration.request}`];
  const found = attributes.required
    .filter((name) => !(name in configuration))
    .map((name) => `missing ${name}`);
  for (const [name, value] of Object.entries(configuration)) {
    if (["type", "request", "name"].includes(name)) continue;
    const declared = attributes.properties[name];
    const types = declared ? [declared.type].flat() : [];
    if (!declared) found.push(`undeclared ${name}`);
    else if (!jsonTypes(value).some((type) => types.includes(type))) found.push(`${name} is not ${types}`);
    else if (Array.isArray(value) && !value.every((item) => typeof item === declared.items.type))
      found.push(`${name} holds a non-${declared.items.type}`);
  }
  return found;
}

test("package.json contributes a fems debugger for the fems language", () => {
  assert.strictEqual(debuggerContribution.type, debug.DEBUG_TYPE);
  assert.deepStrictEqual(debuggerContribution.languages, ["fems"]);
  assert.ok(debuggerContribution.label);
  const { launch, attach } = debuggerContribution.configurationAttributes;
  assert.deepStrictEqual(launch.required, ["program"]);
  const types = (properties) =>
    Object.fromEntries(Object.entries(properties).map(([name, schema]) => [name, schema.type]));
  assert.deepStrictEqual(types(launch.properties), {
    program: "string",
    args: "array",
    cwd: "string",
    stopOnEntry: "boolean",
    fork: "string",
    command: ["string", "array"],
  });
  assert.deepStrictEqual(types(attach.properties), { host: "string", port: "number" });
  for (const schema of [...Object.values(launch.properties), ...Object.values(attach.properties)]) {
    assert.ok(schema.description, JSON.stringify(schema));
    if ("default" in schema)
      assert.ok(jsonTypes(schema.default).some((t) => [schema.type].flat().includes(t)));
  }
});

test("the initial configurations and the snippets are valid launch and attach configurations", () => {
  const { initialConfigurations, configurationSnippets } = debuggerContribution;
  assert.ok(initialConfigurations.length >= 1);
  for (const configuration of initialConfigurations) {
    assert.strictEqual(configuration.type, "fems");
    assert.deepStrictEqual(problems(configuration), [], JSON.stringify(configuration));
  }
  const requests = configurationSnippets.map((snippet) => snippet.body.request).sort();
  assert.deepStrictEqual(requests, ["attach", "launch"]);
  for (const snippet of configurationSnippets) {
    assert.ok(snippet.label && snippet.description);
    assert.strictEqual(snippet.body.type, "fems");
    assert.deepStrictEqual(problems(snippet.body), [], snippet.label);
  }
  // the check is not vacuous
  assert.deepStrictEqual(problems({ type: "fems", request: "launch", progam: "x", args: "--seed 1" }), [
    "missing program",
    "undeclared progam",
    "args is not array",
  ]);
});

test("breakpoints, the command, its menus and the activation events are contributed", () => {
  // the lines of .fems scripts and of their code: Python files, which the adapter traces too
  assert.deepStrictEqual(manifest.contributes.breakpoints, [{ language: "fems" }, { language: "python" }]);
  const command = manifest.contributes.commands.find((c) => c.command === debug.DEBUG_COMMAND);
  assert.strictEqual(command.title, "Debug this script");
  const { menus } = manifest.contributes;
  for (const menu of ["editor/title/run", "editor/context"]) {
    const item = menus[menu].find((entry) => entry.command === debug.DEBUG_COMMAND);
    assert.strictEqual(item.when, "resourceLangId == fems", menu);
  }
  for (const event of [
    "onDebugResolve:fems",
    "onDebugDynamicConfigurations:fems",
    `onCommand:${debug.DEBUG_COMMAND}`,
  ]) {
    assert.ok(manifest.activationEvents.includes(event), event);
  }
  const settings = manifest.contributes.configuration.properties;
  assert.deepStrictEqual(settings["fems.debug.command"].default, ["fems2py"]);
  assert.deepStrictEqual(settings["fems.debug.args"].default, []);
});

test("activation registers the resolver, the dynamic configurations, the factory and the command", () => {
  const context = { subscriptions: [] };
  debug.registerDebugger(context);
  const byKind = Object.fromEntries(state.providers.map((entry) => [entry.triggerKind ?? "initial", entry]));
  assert.deepStrictEqual(
    state.providers.map((entry) => entry.type),
    ["fems", "fems"],
  );
  assert.ok(byKind.initial.provider instanceof debug.FemsConfigurationResolver);
  assert.ok(
    byKind[vscode.DebugConfigurationProviderTriggerKind.Dynamic].provider instanceof
      debug.OpenScriptConfigurations,
  );
  assert.deepStrictEqual(
    state.factories.map((entry) => entry.type),
    ["fems"],
  );
  assert.ok(state.factories[0].factory instanceof debug.FemsAdapterFactory);
  assert.strictEqual(state.commands.get(debug.DEBUG_COMMAND), debug.debugScript);
  assert.strictEqual(context.subscriptions.length, 4); // each disposed with the extension
});

// ---------------------------------------------------------------------------- the adapter

/** The descriptor the factory gives for a session of this configuration. */
function descriptor(configuration, workspaceFolder) {
  return new debug.FemsAdapterFactory().createDebugAdapterDescriptor({ configuration, workspaceFolder });
}

test("a launch runs `fems2py debug <program> <args…>` over stdio, in the configuration's cwd", () => {
  const launched = descriptor({
    type: "fems",
    request: "launch",
    program: SCRIPT,
    args: MOCK,
    cwd: "/games",
  });
  assert.ok(launched instanceof vscode.DebugAdapterExecutable);
  assert.strictEqual(launched.command, "fems2py");
  assert.deepStrictEqual(launched.args, ["debug", SCRIPT, ...MOCK]);
  assert.deepStrictEqual(launched.options, { cwd: "/games" });
});

test("the command that runs fems2py comes from the configuration, else the setting", () => {
  const launch = { type: "fems", request: "launch", program: SCRIPT, cwd: "/games" };
  const commandLine = (configuration) => {
    const { command, args } = descriptor(configuration);
    return [command, ...args];
  };
  assert.deepStrictEqual(commandLine({ ...launch, command: "/venv/bin/fems2py" }), [
    "/venv/bin/fems2py",
    "debug",
    SCRIPT,
  ]);
  assert.deepStrictEqual(commandLine({ ...launch, command: ["python", "-m", "fems2py"] }), [
    "python",
    "-m",
    "fems2py",
    "debug",
    SCRIPT,
  ]);
  state.settings["fems.debug.command"] = ["/opt/fems/bin/fems2py"];
  assert.deepStrictEqual(commandLine(launch), ["/opt/fems/bin/fems2py", "debug", SCRIPT]);
  assert.deepStrictEqual(commandLine({ ...launch, command: "fems2py" }), ["fems2py", "debug", SCRIPT]);
});

test("without a cwd the run starts in the workspace folder, else the script's folder", () => {
  const launch = { type: "fems", request: "launch", program: SCRIPT };
  const folder = { uri: vscode.Uri.file("/games"), name: "games", index: 0 };
  assert.deepStrictEqual(descriptor(launch, folder).options, { cwd: "/games" });
  assert.deepStrictEqual(descriptor(launch, undefined).options, { cwd: path.dirname(SCRIPT) });
});

test("a restarted frame's child session (startDebugging) resolves unchanged and runs like its parent", () => {
  // the adapter sends its own launch configuration back with `fork` and `stopOnEntry`
  const child = {
    type: "fems",
    request: "launch",
    name: "Debug werewolf.fems (fork 1:12)",
    program: SCRIPT,
    args: [...MOCK, "--db", "games.db"],
    cwd: "/games",
    stopOnEntry: true,
    fork: "1:12",
  };
  assert.deepStrictEqual(problems(child), []);
  const resolver = new debug.FemsConfigurationResolver();
  assert.deepStrictEqual(resolver.resolveDebugConfiguration(undefined, child), child);
  const { command, args, options } = descriptor(child);
  assert.deepStrictEqual([command, ...args], ["fems2py", "debug", SCRIPT, ...MOCK, "--db", "games.db"]);
  assert.deepStrictEqual(options, { cwd: "/games" });
  const { fork } = debuggerContribution.configurationAttributes.launch.properties;
  assert.match("3:40", new RegExp(fork.pattern));
  assert.doesNotMatch("3-40", new RegExp(fork.pattern));
});

test("an attach connects to the host and port of `--listen`", () => {
  const server = descriptor({ type: "fems", request: "attach", host: "10.0.0.7", port: 4711 });
  assert.ok(server instanceof vscode.DebugAdapterServer);
  assert.deepStrictEqual({ ...server }, { port: 4711, host: "10.0.0.7" });
  assert.deepStrictEqual(
    { ...descriptor({ type: "fems", request: "attach", port: 4711 }) },
    { port: 4711, host: "127.0.0.1" },
  );
});

// ----------------------------------------------------------------- configurations and F5

test("F5 without a launch.json debugs the active script with the module options of the settings", () => {
  const resolver = new debug.FemsConfigurationResolver();
  state.settings["fems.debug.args"] = MOCK;
  state.activeTextEditor = { document: document(SCRIPT) };
  const resolved = resolver.resolveDebugConfiguration(undefined, {});
  assert.deepStrictEqual(resolved, {
    type: "fems",
    request: "launch",
    name: "Debug werewolf.fems",
    program: SCRIPT,
    args: MOCK,
    cwd: path.dirname(SCRIPT),
    stopOnEntry: false,
  });
  assert.deepStrictEqual(problems(resolved), []);
  const { command, args } = descriptor(resolved);
  assert.deepStrictEqual([command, ...args], ["fems2py", "debug", SCRIPT, ...MOCK]);
});

test("F5 off a .fems file, a launch without a program, an attach without a port: each refused", () => {
  const resolver = new debug.FemsConfigurationResolver();
  state.activeTextEditor = { document: document("/games/game.py", "python") };
  assert.strictEqual(resolver.resolveDebugConfiguration(undefined, {}), undefined);
  assert.strictEqual(
    resolver.resolveDebugConfiguration(undefined, { type: "fems", request: "launch", name: "x" }),
    undefined,
  );
  assert.strictEqual(
    resolver.resolveDebugConfiguration(undefined, { type: "fems", request: "attach", name: "x" }),
    undefined,
  );
  assert.strictEqual(state.errors.length, 3, state.errors.join("\n"));
});

test("a launch without a program debugs the active script; one with a program keeps it", () => {
  const resolver = new debug.FemsConfigurationResolver();
  state.activeTextEditor = { document: document(SCRIPT) };
  const launch = { type: "fems", request: "launch", name: "x", args: MOCK };
  assert.deepStrictEqual(resolver.resolveDebugConfiguration(undefined, launch), {
    ...launch,
    program: SCRIPT,
  });
  const named = { ...launch, program: "/games/town/town.fems" };
  assert.deepStrictEqual(resolver.resolveDebugConfiguration(undefined, named), named);
  const attach = { type: "fems", request: "attach", name: "a", port: 4711 };
  assert.deepStrictEqual(resolver.resolveDebugConfiguration(undefined, attach), attach);
  assert.deepStrictEqual(state.errors, []);
});

test("the Run and Debug view offers one configuration per open script on disk", () => {
  state.textDocuments = [
    document(SCRIPT),
    document("/games/werewolf/game.py", "python"),
    { languageId: "fems", uri: { scheme: "untitled", fsPath: "Untitled-1", path: "Untitled-1" } },
  ];
  const offered = new debug.OpenScriptConfigurations().provideDebugConfigurations();
  assert.deepStrictEqual(offered, [debug.launchConfiguration(SCRIPT)]);
});

// ------------------------------------------------------------------ "Debug this script"

test("'Debug this script' starts a launch of the file of the menu, or of the active editor", async () => {
  const folder = { uri: vscode.Uri.file("/games"), name: "games", index: 0 };
  state.workspaceFolders = [folder];
  assert.strictEqual(await debug.debugScript(vscode.Uri.file(SCRIPT)), true);
  state.activeTextEditor = { document: document(SCRIPT) };
  assert.strictEqual(await debug.debugScript(undefined), true);
  const expected = { folder, configuration: debug.launchConfiguration(SCRIPT) };
  assert.deepStrictEqual(state.started, [expected, expected]);
  assert.strictEqual(expected.configuration.program, SCRIPT);
  assert.strictEqual(expected.configuration.request, "launch");
});

test("'Debug this script' with no .fems file at hand says so and starts nothing", async () => {
  state.activeTextEditor = { document: document("/games/notes.md", "markdown") };
  assert.strictEqual(await debug.debugScript(undefined), false);
  assert.deepStrictEqual(state.started, []);
  assert.strictEqual(state.errors.length, 1);
});
