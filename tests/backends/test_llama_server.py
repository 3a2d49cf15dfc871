"""specchat's remote backend against llama.cpp's own llama-server on the bundled model, built from
the llama.cpp that llama-cpp-python vendors and started by scripts/llama-server (tests/servers.py).

What a user would notice: answers stream; llama-server's greedy answer is specchat's own greedy
answer (same weights, same batch-invariant kernels, flash attention off); a multi-token (coloured)
run appears exactly where the server's counters say drafted tokens were accepted, and the accepted
counts add up to the server's own totals (its /metrics, read apart from the stream).
"""

from __future__ import annotations

import os
from pathlib import Path

import openai
import pytest

from specchat.backends.base import ChatMessage
from specchat.decoding.registry import build_decoder, default_decoder, unavailable_reason
from specchat.decoding.sampling import SamplingParams
from specchat.engine.choice import engine_for
from specchat.engine.events import DoneEvent, StepEvent
from specchat.engine.protocol import GenerationRequest
from specchat.evaluation.race import RaceTurn, run_decoder
from specchat.models import LoadOptions, load_model
from specchat.prompting import chat_prompt_ids
from tests.servers import REPEATING_PROMPT, server_metrics

pytestmark = pytest.mark.slow

REPEAT = [ChatMessage("user", REPEATING_PROMPT)]
QUESTION = [ChatMessage("user", "What is the capital of France? Answer in one sentence.")]


def answer(base_url: str, messages, max_tokens: int) -> tuple[list[StepEvent], DoneEvent]:
    backend = load_model(None, LoadOptions(backend="openai", base_url=base_url))
    engine = engine_for(backend, build_decoder(default_decoder(backend), {}, backend))
    request = GenerationRequest((), max_tokens, (), SamplingParams(), messages=tuple(messages))
    events = list(engine.generate(request))
    backend.close()
    return events[:-1], events[-1]


def test_the_server_lists_the_bundled_model_and_only_its_own_method_runs(llama_server):
    backend = load_model(None, LoadOptions(backend="openai", base_url=llama_server.base_url))
    assert backend.model_name == "smollm2" and backend.server_kind == "llamacpp"
    assert default_decoder(backend) == "server"
    reason = unavailable_reason("pld", backend)
    assert reason and "logits" in reason
    backend.close()


def test_answers_stream_and_greedy_there_is_greedy_here(llama_server, fresh_llama):
    steps, done = answer(llama_server.base_url, QUESTION, 40)
    assert done.finish_reason in ("eos", "max_tokens") and done.error is None
    assert len([s for s in steps if s.text]) >= 5  # streamed, not in one piece
    # no speculation: one token per step, nothing drafted, so nothing coloured
    assert all(len(s.tokens) <= 1 and s.drafted == 0 and s.accepted == 0 for s in steps)
    assert done.stats.generated_tokens == sum(len(s.tokens) for s in steps) > 5
    local = run_decoder(
        fresh_llama, "greedy", {}, chat_prompt_ids(fresh_llama, QUESTION), 40, SamplingParams()
    )
    assert done.text == local.text
    assert done.stats.generated_tokens == len(local.token_ids)


def test_runs_are_coloured_exactly_where_the_server_counts_accepted_drafts(llama_server_ngram):
    before = server_metrics(llama_server_ngram)
    steps, done = answer(llama_server_ngram.base_url, REPEAT, 96)
    after = server_metrics(llama_server_ngram)
    accepted = (
        after["spec_decode_num_accepted_tokens_total"]
        - before["spec_decode_num_accepted_tokens_total"]
    )
    drafted = (
        after["spec_decode_num_draft_tokens_total"] - before["spec_decode_num_draft_tokens_total"]
    )
    passes = after["spec_decode_num_drafts_total"] - before["spec_decode_num_drafts_total"]
    assert done.error is None and accepted > 0  # the prompt gives n-grams something to find
    # the accepted and drafted counts of the steps are the server's own totals
    assert sum(s.accepted for s in steps) == accepted == done.stats.accepted
    assert sum(s.drafted for s in steps) == drafted == done.stats.drafted
    assert len([s for s in steps if s.drafted]) == passes
    # a step is a run of several tokens exactly when drafts were accepted in it: the accepted
    # drafts plus the server's own next token (the last step may be cut short by EOS or the limit)
    for step in steps[:-1]:
        assert len(step.tokens) == step.accepted + 1
    assert any(len(s.tokens) > 1 for s in steps)
    assert done.text == "".join(s.text for s in steps)


def test_the_servers_stream_lines_up_with_its_counters_as_documented(llama_server_ngram):
    """docs/remote.md: with timings_per_token, every token is its own chunk (or arrives with the
    next one when it has no text), and a verified pass raises the draft counters on its first
    token; its other tokens follow before the counters move again."""
    client = openai.OpenAI(base_url=llama_server_ngram.base_url, api_key="none", max_retries=0)
    stream = client.chat.completions.create(
        model="smollm2",
        messages=[{"role": m.role, "content": m.content} for m in REPEAT],
        max_tokens=96,
        temperature=0,
        stream=True,
        extra_body={"timings_per_token": True},
    )
    rows = []
    for chunk in stream:
        timings = (chunk.model_extra or {}).get("timings")
        if timings:
            rows.append(
                (
                    timings["predicted_n"],
                    timings.get("draft_n", 0),
                    timings.get("draft_n_accepted", 0),
                )
            )
    client.close()
    generated = [g for g, _, _ in rows]
    assert generated == sorted(generated)
    jumps = 0
    i = 1
    while i < len(rows):
        grown = rows[i][2] - rows[i - 1][2]
        if grown:
            jumps += 1
            # the pass's accepted tokens follow, with the counters unchanged
            following = [r for r in rows[i + 1 :] if r[0] <= rows[i][0] + grown]
            assert all(r[1:] == rows[i][1:] for r in following)
        i += 1
    assert jumps > 0


def test_the_bench_peer_is_llama_servers_own_speculation_on_the_same_model(
    llama_server_binary, fresh_llama
):
    from specchat.bench.peers import LlamaServerPeer

    prompt = chat_prompt_ids(fresh_llama, REPEAT)
    turn = RaceTurn(tuple(REPEAT), tuple(prompt), 48)
    peer = LlamaServerPeer(fresh_llama, "ngram-mod-3", Path(llama_server_binary))
    try:
        (outcome,) = peer.run(turn)
        # a repeat of the race: ngram-mod must not draft the answer it remembers from the first
        (again,) = peer.run(turn)
    finally:
        peer.close()
    assert again.token_ids == outcome.token_ids
    assert (again.stats.drafted, again.stats.accepted) == (
        outcome.stats.drafted,
        outcome.stats.accepted,
    )
    local = run_decoder(fresh_llama, "greedy", {}, prompt, 48, SamplingParams())
    # greedy under the server's speculation is greedy: the same ids as ours
    assert outcome.token_ids == local.token_ids
    assert outcome.text == local.text
    stats = outcome.stats
    assert 0 < stats.accepted <= stats.drafted and stats.decode_seconds > 0
    assert peer.label == "peer:llama-server:ngram-mod-3"


def test_bench_peers_include_llama_servers_own_speculation(llama_server_binary, tmp_path):
    import json
    import subprocess
    import sys

    data = tmp_path / "q.jsonl"
    question = {"question_id": 1, "category": "copy", "turns": [REPEATING_PROMPT]}
    data.write_text(json.dumps(question) + "\n")
    out = tmp_path / "r.json"
    result = subprocess.run(
        [sys.executable, "-m", "specchat", "bench", "--data", str(data), "-d", "pld"]
        + ["--max-tokens", "24", "--threads", "1", "--peers", "--json", str(out)]
        + ["--backend", "llama"],  # the peers' answers are judged against this runtime's
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "SPECCHAT_LLAMA_SERVER": llama_server_binary},
    )
    assert result.returncode == 0, result.stderr
    summary = json.loads(out.read_text())["summary"]
    for spec in ("none", "ngram-simple", "ngram-mod", "ngram-mod-3"):
        figures = summary[f"peer:llama-server:{spec}"]["overall"]
        assert figures["exact_rate"] == 1.0 and figures["tokens_per_second"] > 0
    # the closing note gives ours ÷ theirs
    assert "pld ÷ peer:llama-server:ngram-mod:" in result.stdout
    assert "greedy ÷ peer:llama-server:none:" in result.stdout


def _children(pid: int) -> list[int]:
    """The processes whose parent is `pid` (read from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_text(errors="replace")
    except OSError:
        return ""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
def test_a_killed_bench_stops_the_servers_it_started(llama_server_binary, tmp_path, how):
    """`kill` on a bench racing llama-server peers: no server it started is left running.
    SIGTERM ends the bench as an exception does (exit 143); SIGKILL ends it at once, and the
    servers are sent SIGTERM by the kernel as their parent dies."""
    import json
    import signal
    import subprocess
    import sys
    import time

    data = tmp_path / "q.jsonl"
    data.write_text(json.dumps({"question_id": 1, "category": "c", "turns": ["Hi"]}) + "\n")
    log = tmp_path / "bench.err"
    with log.open("wb") as printed:
        bench = subprocess.Popen(
            [sys.executable, "-m", "specchat", "bench", "--data", str(data), "--threads", "1"]
            + ["--max-tokens", "8", "--repeats", "1000", "--peers", "--backend", "llama"],
            stdout=subprocess.DEVNULL,
            stderr=printed,
            env={**os.environ, "SPECCHAT_LLAMA_SERVER": llama_server_binary},
        )

    def said() -> str:  # where a run went wrong: what the bench printed
        return log.read_text(errors="replace")[-2000:]

    servers: list[int] = []
    try:
        deadline = time.monotonic() + 300
        while not servers and time.monotonic() < deadline and bench.poll() is None:
            time.sleep(0.2)
            servers = [pid for pid in _children(bench.pid) if "llama-server" in _cmdline(pid)]
        assert servers, f"the bench started no llama-server: {said()}"
        sent = getattr(signal, how)
        bench.send_signal(sent)
        try:
            ended = bench.wait(timeout=120)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the bench ran on 120 s after {how}: {said()}")
        assert ended == (143 if sent == signal.SIGTERM else -signal.SIGKILL), said()
        deadline = time.monotonic() + 60
        while [pid for pid in servers if _alive(pid)] and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not [pid for pid in servers if _alive(pid)]
    finally:
        if bench.poll() is None:
            bench.kill()
            bench.wait()
        for pid in servers:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
