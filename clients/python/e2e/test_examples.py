"""The examples in examples/python run against a real completiond and print what they promise."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys
import unittest

from .test_e2e import address

ROOT = pathlib.Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "examples" / "python"
SRC = ROOT / "clients" / "python" / "src"


def run(name: str, *args: str) -> str:
    """Runs one example as its README says, against COMPLETIOND_ADDR; its stdout, or a failure."""
    env = dict(os.environ, PYTHONPATH=str(SRC), COMPLETIOND_ADDR=address())
    proc = subprocess.run([sys.executable, str(EXAMPLES / name), *args], env=env, capture_output=True,
                          text=True, timeout=120)
    if proc.returncode != 0:
        raise AssertionError(f"{name} exited {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
    return proc.stdout


class ExamplesTest(unittest.TestCase):
    def test_stream(self) -> None:
        out = run("stream.py")
        self.assertRegex(out, r"\[started cmpl_\w+ on sim \(sim-1\)\]")
        self.assertIn("[transition RETRY, after ", out)
        self.assertIn("because ERROR_KIND_SERVER 503]", out)
        self.assertIn("[transition STREAM_RESUME", out)
        self.assertIn("[transition COMPLETED, terminal]", out)
        self.assertIn('Simulated answer to "Explain backoff.":', out, "the tokens are printed")
        self.assertIn("[result: STOP_REASON_END_TURN, 3 attempts", out)

    def test_stream_discard(self) -> None:
        out = run("stream.py", "--route", "sim-noprefill", "--faults", "cut=4")
        self.assertIn("[transition RETRY, after ", out)
        self.assertIn("discarding attempts [1]", out)
        self.assertIn("1 attempts discarded", out)

    def test_error(self) -> None:
        out = run("error.py")
        sections = out.split("== ")[1:]
        self.assertEqual(len(sections), 3, out)
        outage, rate, invalid = sections
        self.assertIn("code             UNAVAILABLE", outage)
        self.assertIn("terminal reason  TRANSITION_REASON_MODEL_ERROR (ErrorInfo reason MODEL_ERROR)", outage)
        self.assertRegex(outage, r"retryable        True, retry after [\d.]+s")
        self.assertIn("code             RESOURCE_EXHAUSTED", rate)
        self.assertIn("retryable        True, retry after 600s", rate)
        self.assertIn("code             INVALID_ARGUMENT", invalid)
        self.assertIn("terminal reason  TRANSITION_REASON_UNSPECIFIED", invalid)
        self.assertIn("retryable        False", invalid)
        self.assertIn("field violation  messages: at least one message is required", invalid)
        self.assertIn("field violation  max_output_tokens: ", invalid)

    def test_error_leaves_the_route_as_it_found_it(self) -> None:
        """Run after run, the outage is the upstream's, never an open circuit an earlier run left."""
        for attempt in range(3):
            outage = run("error.py").split("== ")[1]
            self.assertIn("code             UNAVAILABLE", outage, f"run {attempt + 1}")
            self.assertNotIn("circuit", outage.lower(), f"run {attempt + 1}: {outage}")
            self.assertIn("overloaded", outage.lower(), f"run {attempt + 1}: {outage}")

    def test_async_stream(self) -> None:
        out = run("async_stream.py")
        self.assertRegex(out, r"(?m)^clean +COMPLETED +16 words$")
        self.assertRegex(out, r"(?m)^rate-limited +RETRY COMPLETED +16 words$")
        self.assertRegex(out, r"(?m)^cut +STREAM_RESUME COMPLETED +16 words$")

    def test_toolloop(self) -> None:
        out = run("toolloop.py")
        self.assertEqual(len(re.findall(r"\[tool get_weather\(\{.*\}\) → \{.*\"forecast\": \"sunny\".*\}\]", out)), 2, out)
        self.assertEqual(out.count("[NEXT_TURN]"), 2, out)
        self.assertIn("[COMPLETED]", out)
        self.assertIn("[done: STOP_REASON_END_TURN", out)
        self.assertIn("[3 turns, 2 tool calls answered]", out)


if __name__ == "__main__":
    unittest.main()
