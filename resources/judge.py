"""LLM-judge resources: thin Dagster wrappers that hand the library an object satisfying its `Judge` protocol.

`LocalEndpointJudge` talks to an OpenAI-compatible endpoint the clinic runs locally; `CannedJudge` replays
fixed
replies (tests, demos); `NoJudge` means "not configured" — the llm_judge criterion is then skipped with a
visible
note, never simulated.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import dagster as dg

from noisycal_platform.correctness.criteria import Judge, OpenAICompatibleJudge

__all__ = ["CannedJudge", "CannedVerdictJudge", "JudgeResource", "LocalEndpointJudge", "NoJudge"]


class JudgeResource(dg.ConfigurableResource):
    """Base: `get_judge()` returns a library Judge, or None when no judge is configured."""

    def get_judge(self) -> Judge | None:  # pragma: no cover - overridden
        return None


class NoJudge(JudgeResource):
    """No judge configured: the llm_judge criterion is skipped and says so."""


class LocalEndpointJudge(JudgeResource):
    """POST {base_url}/chat/completions on a local OpenAI-compatible server (vLLM, llama.cpp, Ollama, ...)."""

    base_url: str
    model: str
    timeout_s: float = 60.0

    def get_judge(self) -> Judge:
        if not self.base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must start with http:// or https://, got {self.base_url!r}")
        return OpenAICompatibleJudge(base_url=self.base_url, model=self.model, timeout_s=self.timeout_s)


@dataclass
class CannedVerdictJudge:
    """Judge that replies from a table keyed by the model answer (the last line of the user message)."""

    replies: dict[str, str] = field(default_factory=dict)
    default_reply: str = '{"labels": [], "invalid": true, "contradiction": false}'
    name: str = "llm_judge"

    def complete(self, messages: list[dict[str, str]]) -> str:
        answer = messages[-1]["content"].rsplit("Model answer: ", 1)[-1]
        return self.replies.get(answer, self.default_reply)


class CannedJudge(JudgeResource):
    """Canned verdicts for tests: `replies_json` maps answer text -> raw judge reply."""

    replies_json: str = "{}"
    default_reply: str = '{"labels": [], "invalid": true, "contradiction": false}'

    def get_judge(self) -> Judge:
        replies = json.loads(self.replies_json)
        if not isinstance(replies, dict):
            raise ValueError(f"replies_json must be a JSON object, got {type(replies).__name__}")
        return CannedVerdictJudge(
            replies={str(k): str(v) for k, v in replies.items()}, default_reply=self.default_reply
        )
