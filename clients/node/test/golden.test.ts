// Golden: every shared transcript, decoded from its wire bytes and folded,
// must give exactly its `expect` object, field by field.

import assert from "node:assert/strict";
import { test } from "node:test";
import { Fold } from "../src/index";
import { TRANSCRIPTS, events, expectOf, load, statusError, transcriptFiles } from "./transcripts";

const files = transcriptFiles();

test("the golden transcripts are there", () => {
  // Without this, a missing or empty folder would pass vacuously.
  assert.ok(files.length > 0, `no transcript files in ${TRANSCRIPTS}`);
});

for (const file of files) {
  const t = load(file);
  test(t.name, () => {
    assert.equal(`${t.name}.json`, file, "name is the file name");
    const fold = new Fold();
    for (const ev of events(t)) fold.add(ev);
    const got = expectOf(fold, statusError(t, fold));
    assert.deepEqual(Object.keys(got).sort(), Object.keys(t.expect).sort(), "the expect object's fields");
    for (const [field, want] of Object.entries(t.expect)) {
      assertField(field, got[field], want);
    }
  });
}

/** assertField compares one field; a retry delay within a nanosecond (a float of seconds). */
function assertField(field: string, got: unknown, want: unknown): void {
  if (field === "error" && isRecord(got) && isRecord(want)) {
    for (const [k, w] of Object.entries(want)) {
      const g: unknown = got[k];
      if (k === "retry_delay_seconds" && typeof g === "number" && typeof w === "number") {
        assert.ok(Math.abs(g - w) < 1e-9, `error.${k}: got ${g}, want ${w}`);
      } else {
        assert.deepEqual(g, w, `error.${k}`);
      }
    }
    assert.deepEqual(Object.keys(got).sort(), Object.keys(want).sort(), "error's fields");
    return;
  }
  assert.deepEqual(got, want, field);
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null;
}
