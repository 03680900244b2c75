"""Golden test: every shared transcript's events and status fold to exactly its expect object.

The Go and TypeScript libraries read the same files (clients/testdata), so
the three cannot drift apart. There is one test per file, named after it.
"""

from __future__ import annotations

import pathlib
import unittest
from typing import Any, Callable, Dict

import completiond

from . import support


def computed(transcript: Dict[str, Any]) -> Dict[str, Any]:
    """What the library computes from a transcript: its fold of the events and its error of the status."""
    fold = completiond.Fold()
    for ev in support.events(transcript):
        fold.add(ev)
    got = fold.to_dict()
    err = support.status_error(transcript)
    got["error"] = err.to_dict() if err is not None else None
    return got


class GoldenTest(unittest.TestCase):
    """One test per transcript file (added below), and one that there are files at all."""

    maxDiff = None

    def test_there_are_transcripts(self) -> None:
        files = support.transcript_files()
        self.assertTrue(files, f"no transcripts in {support.TRANSCRIPTS}: the golden tests would pass vacuously")

    def check(self, path: pathlib.Path) -> None:
        transcript = support.load(path)
        self.assertEqual(transcript["name"], path.stem, "a transcript's name is its file's")
        expect, got = transcript["expect"], computed(transcript)
        self.assertEqual(sorted(got), sorted(expect), "the fields of expect")
        for field in expect:
            with self.subTest(field=field):
                self.assertEqual(got[field], expect[field], f"{path.name}: {field}")


def _golden(path: pathlib.Path) -> Callable[[GoldenTest], None]:
    def test(self: GoldenTest) -> None:
        self.check(path)

    test.__doc__ = f"{path.name} folds to its expect object."
    return test


for _path in support.transcript_files():
    setattr(GoldenTest, "test_" + _path.stem, _golden(_path))
