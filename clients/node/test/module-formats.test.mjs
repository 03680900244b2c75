// The package as its users load it: by its name (the package's "exports"),
// from an ES module and from CommonJS, with the same exports either way. Runs
// on the built dist/ (npm test builds it first); make dist-check does the same
// from the npm pack tarball installed into an empty project.

import assert from "node:assert/strict";
import { createRequire } from "node:module";
import { test } from "node:test";

const require = createRequire(import.meta.url);

test("import and require load the same exports", async () => {
  const esm = await import("@completiond/client");
  const cjs = require("@completiond/client");
  const names = Object.keys(cjs).filter((k) => k !== "__esModule");
  assert.ok(names.length > 20, `only ${names.length} exports`);
  for (const name of names) {
    assert.ok(name in esm, `${name} is exported to require() but not to import`);
    assert.equal(esm[name], cjs[name], `${name} differs between import and require`);
  }
  for (const name of ["Client", "CompletiondError", "Fold", "userText", "duration", "transitionReasonToJSON"]) {
    assert.equal(typeof esm[name], "function", `${name} is not a function`);
  }
});

test("the version is the package's", () => {
  assert.equal(require("@completiond/client/package.json").version, require("../package.json").version);
});
