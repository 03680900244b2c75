"""google.rpc and completiond in one process: whichever comes first, and whatever its version.

googleapis-common-protos is not a Debian package, so the test makes a stand-in
of it: the same google/rpc files (code, status, error_details), registered
under the same names as the real distribution registers them, from a newer
googleapis — ErrorInfo has a field the vendored copy lacks — so that two
copies in one process collide unless completiond uses the one that is there.
"""

from __future__ import annotations

import ast
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import textwrap
import unittest
from typing import Dict

from google.protobuf import descriptor_pb2

SRC = pathlib.Path(__file__).resolve().parents[1] / "src"
VENDORED = SRC / "completiond" / "_proto" / "google" / "rpc"
MODULES = ["code_pb2", "status_pb2", "error_details_pb2"]
DEPENDENCIES = {
    "code_pb2": "",
    "status_pb2": "from google.protobuf import any_pb2\n",
    "error_details_pb2": "from google.protobuf import duration_pb2\n",
}


def serialized(module: str) -> bytes:
    """The serialized FileDescriptorProto a vendored module registers, read from its source (not imported)."""
    source = (VENDORED / f"{module}.py").read_text()
    m = re.search(r"AddSerializedFile\((b'.*?')\)\n", source)
    assert m, f"{module}: no AddSerializedFile"
    value = ast.literal_eval(m.group(1))
    assert isinstance(value, bytes)
    return value


def stand_in(root: pathlib.Path, skew: bool) -> None:
    """Writes google/rpc/{code,status,error_details}_pb2.py under root, as googleapis-common-protos has them."""
    pkg = root / "google" / "rpc"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    for module in MODULES:
        fdp = descriptor_pb2.FileDescriptorProto.FromString(serialized(module))
        if skew and module == "error_details_pb2":
            info = next(m for m in fdp.message_type if m.name == "ErrorInfo")
            info.field.add(name="newer_googleapis", json_name="newerGoogleapis", number=99,
                           type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
                           label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
        (pkg / f"{module}.py").write_text(textwrap.dedent(f"""\
            from google.protobuf import descriptor_pool as _descriptor_pool
            from google.protobuf.internal import builder as _builder
            {DEPENDENCIES[module]}
            DESCRIPTOR = _descriptor_pool.Default().AddSerializedFile({fdp.SerializeToString()!r})
            _builder.BuildMessageAndEnumDescriptors(DESCRIPTOR, globals())
            _builder.BuildTopDescriptorsAndMessages(DESCRIPTOR, 'google.rpc.{module}', globals())
            """))


# Runs in a fresh interpreter: decodes a status whose details are an ErrorInfo
# and a RetryInfo, packed with google.rpc's own classes.
DECODE = """
import completiond
from google.protobuf import any_pb2, duration_pb2
from google.rpc import error_details_pb2, status_pb2
details = []
for d in (error_details_pb2.ErrorInfo(reason="MODEL_ERROR", domain="completiond.completion.v1"),
          error_details_pb2.RetryInfo(retry_delay=duration_pb2.Duration(seconds=2))):
    a = any_pb2.Any()
    a.Pack(d)
    details.append(a)
raw = status_pb2.Status(code=14, message="m", details=details).SerializeToString()
err = completiond.error_from_status(14, "m", raw)
assert (err.reason, err.retry_delay) == ("MODEL_ERROR", 2.0), (err.reason, err.retry_delay)
assert completiond.error_details is error_details_pb2, completiond._rpc.SOURCE
assert isinstance(err.details[0], error_details_pb2.ErrorInfo)
print(completiond._rpc.SOURCE)
"""


def python(code: str, *path: pathlib.Path) -> subprocess.CompletedProcess:
    env: Dict[str, str] = dict(os.environ, PYTHONPATH=os.pathsep.join(str(p) for p in path), PYTHONDONTWRITEBYTECODE="1")
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)


class GoogleRpcTest(unittest.TestCase):
    def setUp(self) -> None:
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.skewed = pathlib.Path(tmp.name) / "skewed"
        self.same = pathlib.Path(tmp.name) / "same"
        stand_in(self.skewed, skew=True)
        stand_in(self.same, skew=False)

    def test_the_stand_in_collides_with_a_second_copy(self) -> None:
        """Not vacuous: the vendored copy and the skewed one cannot both be registered."""
        out = python("import completiond._proto.google.rpc.error_details_pb2\nimport google.rpc.error_details_pb2",
                     SRC, self.skewed)
        self.assertNotEqual(out.returncode, 0, "the two copies were both accepted")
        self.assertIn("google/rpc/error_details.proto", out.stderr)

    def test_either_order_any_version(self) -> None:
        for name, code in [
            ("google.rpc first", "import google.rpc.error_details_pb2, google.rpc.status_pb2\n" + DECODE),
            ("completiond first", DECODE),
        ]:
            for stand_in_path in (self.skewed, self.same):
                with self.subTest(name, stand_in=stand_in_path.name):
                    out = python(code, SRC, stand_in_path)
                    self.assertEqual(out.returncode, 0, out.stderr)
                    self.assertEqual(out.stdout.strip(), "googleapis-common-protos")

    def test_without_googleapis_common_protos(self) -> None:
        code = DECODE.replace("from google.rpc import error_details_pb2, status_pb2",
                              "from completiond import error_details as error_details_pb2, rpc_status as status_pb2")
        out = python(code, SRC)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(out.stdout.strip(), "completiond._proto")


if __name__ == "__main__":
    unittest.main()
