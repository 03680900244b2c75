"""Client construction and the request helpers."""

from __future__ import annotations

import datetime
import os
import unittest
from unittest import mock

import completiond
from completiond import pb


class ClientTest(unittest.TestCase):
    def test_default_address(self) -> None:
        with mock.patch.dict(os.environ, {"COMPLETIOND_ADDR": ""}):
            self.assertEqual(completiond.default_address(), "localhost:50051")
        with mock.patch.dict(os.environ, {"COMPLETIOND_ADDR": "10.0.0.1:9"}):
            self.assertEqual(completiond.default_address(), "10.0.0.1:9")

    def test_channels(self) -> None:
        # Channels connect lazily: constructing and closing needs no server.
        with completiond.Client("127.0.0.1:1") as plain:
            self.assertIsNotNone(plain.stub)
        with completiond.Client("127.0.0.1:1", tls=True, api_key="secret") as secure:
            self.assertIsNotNone(secure.stub)

    def test_connections(self) -> None:
        # connections=N: N channels, each with its own subchannel pool (so its
        # own HTTP/2 connection), each call on the next; the default is one.
        with completiond.Client("127.0.0.1:1") as one:
            self.assertEqual(len(one.channels), 1)
            self.assertIs(one.stub, one.stub)
        with completiond.Client("127.0.0.1:1", connections=3) as three:
            self.assertEqual(len(three.channels), 3)
            stubs = [three.stub for _ in range(6)]
            self.assertEqual(len({id(s) for s in stubs}), 3)
            self.assertIs(stubs[0], stubs[3])
        self.assertIsNone(completiond.client.spread_options(None, 1))
        self.assertEqual(completiond.client.spread_options([("a", 1)], 2),
                         [("a", 1), ("grpc.use_local_subchannel_pool", 1)])

    def test_text_request(self) -> None:
        req = completiond.text_request("Explain backoff.", route="sim", resume_grace=datetime.timedelta(seconds=90),
                                       metadata={"sim.faults": "cut=4"}, max_output_tokens=100,
                                       delivery=pb.DELIVERY_MODE_SETTLED)
        self.assertEqual(list(req.messages), [completiond.user_message("Explain backoff.")])
        self.assertEqual(req.messages[0].role, pb.ROLE_USER)
        self.assertEqual(req.route, "sim")
        self.assertEqual(req.resume_grace.seconds, 90)
        self.assertEqual(dict(req.metadata), {"sim.faults": "cut=4"})
        self.assertEqual(req.max_output_tokens, 100)
        self.assertEqual(completiond.text_request("x", resume_grace=1.5).resume_grace.nanos, 500_000_000)
        self.assertFalse(completiond.text_request("x").HasField("resume_grace"))

    def test_public_names(self) -> None:
        for name in completiond.__all__:
            self.assertTrue(hasattr(completiond, name), name)
        self.assertEqual(completiond.__version__, "0.2.0")
        self.assertIs(completiond.pb.CompletionEvent, pb.CompletionEvent)
        self.assertTrue(hasattr(completiond.error_details, "RetryInfo"))
        self.assertTrue(hasattr(completiond.rpc_status, "Status"))
        self.assertEqual(completiond.rpc_code.UNAVAILABLE, 14)


if __name__ == "__main__":
    unittest.main()
