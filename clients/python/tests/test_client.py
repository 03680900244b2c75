"""Client construction and the request helpers."""

from __future__ import annotations

import datetime
import os
import unittest
from typing import Any, Dict, List, Tuple
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

    def test_text_request_sampling_and_bounds(self) -> None:
        req = completiond.text_request("x", temperature=0.25, top_p=0.9, top_k=40, seed=-7,
                                       stop_sequences=["END", "\n\nHuman:"], max_total_output_tokens=20000)
        # What goes on the wire: every field survives a round trip.
        req = pb.CompleteRequest.FromString(req.SerializeToString())
        self.assertEqual(req.temperature, 0.25)
        self.assertEqual(req.top_p, 0.9)
        self.assertEqual(req.top_k, 40)
        self.assertEqual(req.seed, -7)
        self.assertEqual(list(req.stop_sequences), ["END", "\n\nHuman:"])
        self.assertEqual(req.max_total_output_tokens, 20000)
        self.assertFalse(req.HasField("tool_choice"))
        # The optional fields are sent when zero, and absent when not given.
        zero = pb.CompleteRequest.FromString(completiond.text_request("x", temperature=0.0, seed=0).SerializeToString())
        self.assertTrue(zero.HasField("temperature"))
        self.assertTrue(zero.HasField("seed"))
        plain = completiond.text_request("x")
        for field in ("temperature", "top_p", "top_k", "seed", "max_total_output_tokens"):
            self.assertFalse(plain.HasField(field), field)
        self.assertEqual(list(plain.stop_sequences), [])

    def test_text_request_tool_choice(self) -> None:
        search = pb.Tool(name="search")
        cases: List[Tuple[Dict[str, Any], pb.ToolChoice]] = [
            ({"tool_choice": completiond.tool_choice_auto()}, pb.ToolChoice(mode=pb.TOOL_CHOICE_MODE_AUTO)),
            ({"tool_choice": completiond.tool_choice_any()}, pb.ToolChoice(mode=pb.TOOL_CHOICE_MODE_ANY)),
            ({"tool_choice": completiond.tool_choice_none()}, pb.ToolChoice(mode=pb.TOOL_CHOICE_MODE_NONE)),
            ({"tool_choice": completiond.tool_choice_tool("search")},
             pb.ToolChoice(mode=pb.TOOL_CHOICE_MODE_TOOL, name="search")),
            ({"disable_parallel_tool_use": True}, pb.ToolChoice(disable_parallel_tool_use=True)),
            ({"tool_choice": completiond.tool_choice_tool("search"), "disable_parallel_tool_use": True},
             pb.ToolChoice(mode=pb.TOOL_CHOICE_MODE_TOOL, name="search", disable_parallel_tool_use=True)),
            ({"tool_choice": completiond.tool_choice_none(disable_parallel_tool_use=True)},
             pb.ToolChoice(mode=pb.TOOL_CHOICE_MODE_NONE, disable_parallel_tool_use=True)),
            ({"tool_choice": completiond.tool_choice_tool("search", disable_parallel_tool_use=True)},
             pb.ToolChoice(mode=pb.TOOL_CHOICE_MODE_TOOL, name="search", disable_parallel_tool_use=True)),
            ({"tool_choice": pb.ToolChoice(mode=pb.TOOL_CHOICE_MODE_ANY, disable_parallel_tool_use=True)},
             pb.ToolChoice(mode=pb.TOOL_CHOICE_MODE_ANY, disable_parallel_tool_use=True)),
        ]
        for kwargs, want in cases:
            with self.subTest(**{k: str(v) for k, v in kwargs.items()}):
                req = completiond.text_request("x", tools=[search], **kwargs)
                req = pb.CompleteRequest.FromString(req.SerializeToString())
                self.assertTrue(req.HasField("tool_choice"))
                self.assertEqual(req.tool_choice, want)
        self.assertFalse(completiond.text_request("x").HasField("tool_choice"))
        mine = completiond.tool_choice_any()
        req = completiond.text_request("x", tool_choice=mine, disable_parallel_tool_use=True)
        self.assertFalse(mine.disable_parallel_tool_use, "the caller's message is copied, not changed")
        self.assertTrue(req.tool_choice.disable_parallel_tool_use)

    def test_text_request_reasoning(self) -> None:
        cases: List[Tuple[Dict[str, Any], pb.Reasoning]] = [
            ({"reasoning_effort": pb.REASONING_EFFORT_LOW}, pb.Reasoning(effort=pb.REASONING_EFFORT_LOW)),
            ({"reasoning_effort": "REASONING_EFFORT_HIGH"}, pb.Reasoning(effort=pb.REASONING_EFFORT_HIGH)),
            ({"reasoning_budget_tokens": 4096}, pb.Reasoning(budget_tokens=4096)),
            ({"reasoning_interleaved": True}, pb.Reasoning(interleaved=True)),
            ({"reasoning_effort": pb.REASONING_EFFORT_HIGH, "reasoning_budget_tokens": 2048, "reasoning_interleaved": True},
             pb.Reasoning(budget_tokens=2048, effort=pb.REASONING_EFFORT_HIGH, interleaved=True)),
            ({"reasoning": pb.Reasoning(budget_tokens=8192, effort=pb.REASONING_EFFORT_HIGH)},
             pb.Reasoning(budget_tokens=8192, effort=pb.REASONING_EFFORT_HIGH)),
            ({"reasoning": pb.Reasoning(budget_tokens=8192, effort=pb.REASONING_EFFORT_HIGH),
              "reasoning_effort": pb.REASONING_EFFORT_LOW},
             pb.Reasoning(budget_tokens=8192, effort=pb.REASONING_EFFORT_LOW)),
        ]
        for kwargs, want in cases:
            with self.subTest(**{k: str(v) for k, v in kwargs.items()}):
                req = pb.CompleteRequest.FromString(completiond.text_request("x", **kwargs).SerializeToString())
                self.assertTrue(req.HasField("reasoning"))
                self.assertEqual(req.reasoning, want)
        self.assertFalse(completiond.text_request("x").HasField("reasoning"))
        mine = pb.Reasoning(budget_tokens=4096)
        req = completiond.text_request("x", reasoning=mine, reasoning_interleaved=True)
        self.assertFalse(mine.interleaved, "the caller's message is copied, not changed")
        self.assertTrue(req.reasoning.interleaved)

    def test_text_request_prompt_cache(self) -> None:
        cases: List[Tuple[Dict[str, Any], pb.PromptCache]] = [
            ({"prompt_cache": completiond.prompt_cache_auto()}, pb.PromptCache(mode=pb.PROMPT_CACHE_MODE_AUTO)),
            ({"prompt_cache": completiond.prompt_cache_off()}, pb.PromptCache(mode=pb.PROMPT_CACHE_MODE_OFF)),
            ({"prompt_cache": completiond.prompt_cache_caller()}, pb.PromptCache(mode=pb.PROMPT_CACHE_MODE_CALLER)),
            ({"prompt_cache": completiond.prompt_cache_caller(system=True)},
             pb.PromptCache(mode=pb.PROMPT_CACHE_MODE_CALLER, system=True)),
            ({"prompt_cache": completiond.prompt_cache_auto(system=True)},
             pb.PromptCache(mode=pb.PROMPT_CACHE_MODE_AUTO, system=True)),
            ({"prompt_cache_system": True}, pb.PromptCache(system=True)),
            ({"prompt_cache": completiond.prompt_cache_caller(), "prompt_cache_system": True},
             pb.PromptCache(mode=pb.PROMPT_CACHE_MODE_CALLER, system=True)),
        ]
        for kwargs, want in cases:
            with self.subTest(**{k: str(v) for k, v in kwargs.items()}):
                req = pb.CompleteRequest.FromString(completiond.text_request("x", **kwargs).SerializeToString())
                self.assertTrue(req.HasField("prompt_cache"))
                self.assertEqual(req.prompt_cache, want)
        self.assertFalse(completiond.text_request("x").HasField("prompt_cache"))
        mine = completiond.prompt_cache_caller()
        req = completiond.text_request("x", prompt_cache=mine, prompt_cache_system=True)
        self.assertFalse(mine.system, "the caller's message is copied, not changed")
        self.assertTrue(req.prompt_cache.system)

    def test_content_blocks(self) -> None:
        png, pdf = b"\x89PNG\r\n", b"%PDF-1.7\n"
        cases: List[Tuple[str, pb.ContentBlock, pb.ContentBlock]] = [
            ("text", completiond.text_block("hi"), pb.ContentBlock(text=pb.TextBlock(text="hi"))),
            ("an inline image", completiond.image_block("image/png", png),
             pb.ContentBlock(image=pb.ImageBlock(media_type="image/png", data=png))),
            ("an image by URL", completiond.image_url_block("https://example.com/cat.jpg"),
             pb.ContentBlock(image=pb.ImageBlock(url="https://example.com/cat.jpg"))),
            ("a PDF", completiond.document_block(pdf, title="Spec"),
             pb.ContentBlock(document=pb.DocumentBlock(media_type="application/pdf", data=pdf, title="Spec"))),
            ("a PDF without a title", completiond.document_block(pdf),
             pb.ContentBlock(document=pb.DocumentBlock(media_type="application/pdf", data=pdf))),
            ("a PDF by URL", completiond.document_url_block("https://example.com/spec.pdf", title="Spec"),
             pb.ContentBlock(document=pb.DocumentBlock(url="https://example.com/spec.pdf", title="Spec"))),
            ("a cache breakpoint", completiond.cache_breakpoint(completiond.text_block("a long preamble")),
             pb.ContentBlock(text=pb.TextBlock(text="a long preamble"), cache_breakpoint=True)),
        ]
        for name, got, want in cases:
            with self.subTest(name):
                self.assertEqual(pb.ContentBlock.FromString(got.SerializeToString()), want)
        tool = pb.Tool(name="search")
        self.assertIs(completiond.cache_breakpoint(tool), tool, "the tool itself, marked")
        self.assertTrue(tool.cache_breakpoint)

        doc = completiond.cache_breakpoint(completiond.document_url_block("https://example.com/spec.pdf"))
        req = completiond.text_request("Summarise it.", blocks=[completiond.image_url_block("https://example.com/cat.jpg"), doc],
                                       tools=[completiond.cache_breakpoint(pb.Tool(name="fetch"))])
        req = pb.CompleteRequest.FromString(req.SerializeToString())
        self.assertEqual(list(req.messages), [completiond.user_message(
            "Summarise it.", completiond.image_url_block("https://example.com/cat.jpg"),
            completiond.cache_breakpoint(completiond.document_url_block("https://example.com/spec.pdf")))])
        self.assertEqual(len(req.messages[0].content), 3)
        self.assertTrue(req.messages[0].content[2].cache_breakpoint)
        self.assertTrue(req.tools[0].cache_breakpoint)
        self.assertEqual(list(completiond.user_message("hi").content), [completiond.text_block("hi")])

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
