"""Pure parts: settings files, the history store, run spans, the status line, race summary."""

from __future__ import annotations

import pytest

from specchat.app.tui.figures import Figures, status_text
from specchat.app.tui.replay import Timeline, finishing_places
from specchat.app.tui.screens.race import RacePane, summary_rows
from specchat.engine.events import DoneEvent, StepEvent
from specchat.engine.stats import GenerationStats
from specchat.evaluation.race import Lane, Unreachable
from specchat.evaluation.variants import parse_variant
from specchat.history import HistoryStore, StoredMessage
from specchat.options import RunConfig, resolve
from specchat.run_spans import RunText, coloured
from specchat.settings import dump_settings, load_settings, parse_settings, save_settings
from specchat.themes.palette import COLOUR_BLIND_SAFE


def test_settings_round_trip(tmp_path):
    settings = RunConfig(
        model="x.gguf",
        decoder="beam",
        theme="specchat-light",
        seed=3,
        top_p=0.9,
        decoders={"beam": {"num_beams": 2, "length_penalty": 0.5}, "sample": {"temperature": 0.7}},
        race_servers=["http://127.0.0.1:8080/v1", "https://gpu:8000/v1"],
    )
    path = save_settings(settings, tmp_path / "s.toml")
    loaded, error = load_settings(path)
    assert error is None and loaded == settings
    assert loaded.temperature_for("sample") == 0.7 and loaded.decoder_params("sample") == {}
    assert list(tmp_path.iterdir()) == [path]  # no temporary file left behind


def test_settings_broken_and_missing(tmp_path):
    assert load_settings(tmp_path / "none.toml") == (RunConfig(), None)
    bad = tmp_path / "bad.toml"
    bad.write_text("device = 'tpu'\n")
    settings, error = load_settings(bad)
    assert settings == RunConfig() and "device must be one of auto, cpu, cuda" in error
    bad.write_text("[decoders]\nbeam = 3\n")
    assert "must be tables" in load_settings(bad)[1]
    bad.write_text("race_servers = ['ftp://host']\n")
    assert "race_servers: server@ftp://host" in load_settings(bad)[1]


def test_settings_cli_overrides():
    settings = parse_settings(dump_settings(RunConfig(model="a", device="cuda")))
    assert resolve(settings, {"model": "b", "device": None}, "ask").model == "b"
    assert resolve(settings, {"model": None}, "ask").device == "cuda"


def test_history_store(tmp_path):
    store = HistoryStore(tmp_path / "h.sqlite3")
    chat = store.new_chat("first")
    store.add_message(chat, StoredMessage("user", "hi"))
    stats = GenerationStats(
        prompt_tokens=9,
        generated_tokens=5,
        steps=2,
        drafted=4,
        accepted=3,
        decode_seconds=0.125,
        time_to_first_token=0.5,
        decoders={"pld": {"max_ngram": 3}},
    )
    store.add_message(
        chat,
        StoredMessage(
            "assistant", "hello", "pld", "eos", stats, [(0, 5, 3, "prompt")], None, 0.25, "n=3"
        ),
    )
    # a span written before sources were kept reads back with an unknown source
    store.add_message(chat, StoredMessage("assistant", "old", runs=[(0, 3, 2)]))
    assert store.list_chats()[0].messages == 3
    again = HistoryStore(tmp_path / "h.sqlite3")
    messages = again.messages(chat)
    assert messages[1].runs == [(0, 5, 3, "prompt")] and messages[1].stats == stats
    assert messages[2].runs == [(0, 3, 2, "")]
    again.delete_message(messages[2].id)
    assert (messages[1].elapsed_seconds, messages[1].params) == (0.25, "n=3")
    assert messages[0].stats is None
    again.rename_chat(chat, "renamed")
    assert store.chat_title(chat) == "renamed"
    again.delete_message(messages[1].id)
    assert len(store.messages(chat)) == 1
    store.delete_chat(chat)
    assert again.list_chats() == []
    assert again._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_run_spans_and_colouring():
    runs = RunText()
    runs.add_step("The", 1)
    runs.add_step(" cat sat", 3, "saved")
    runs.add_step(" on the mat", 9, "prompt")
    runs.add_step("", 2)
    assert runs.runs == [(3, 11, 3, "saved"), (11, 22, 9, "prompt")]
    runs.finish("The cat sat on the mat.")
    assert runs.text == "The cat sat on the mat."
    text = coloured(runs.text, runs.runs, COLOUR_BLIND_SAFE)
    styles = {(s.start, s.end, str(s.style)) for s in text.spans}
    assert (3, 11, COLOUR_BLIND_SAFE.short) in styles
    assert (11, 22, COLOUR_BLIND_SAFE.long) in styles
    by_source = coloured(runs.text, runs.runs, COLOUR_BLIND_SAFE, "source")
    styles = {(s.start, s.end, str(s.style)) for s in by_source.spans}
    assert (3, 11, COLOUR_BLIND_SAFE.colour_for_source("saved")) in styles
    assert (11, 22, COLOUR_BLIND_SAFE.colour_for_source("prompt")) in styles
    assert len(set(COLOUR_BLIND_SAFE.sources)) == len(COLOUR_BLIND_SAFE.sources)
    assert coloured("x", [(0, 1, 5, "")], None).spans == []


def test_status_line():
    figures = Figures(decoder="pld", params="max_ngram=3")
    figures.add(StepEvent((1, 2, 3), "abc", 4, 2, "pld", 0.01))
    figures.add(StepEvent((4,), "d", 0, 0, "pld", 0.01))
    assert figures.tokens_per_step == 2.0 and figures.acceptance == 0.5
    figures.finish = "context_full"
    line = str(status_text(figures, "model"))
    assert "200.0 tok/s" in line and "acceptance 50%" in line and "ended: context full" in line


def _pane(label, tps, tokens):
    pane = RacePane(parse_variant(label))
    stats = GenerationStats(
        generated_tokens=len(tokens), steps=len(tokens), decode_seconds=len(tokens) / tps
    )
    pane.done = DoneEvent("eos", (), tuple(tokens), "", stats)
    return pane


def test_race_summary():
    panes = [
        _pane("pld", 150.0, [1, 2]),
        _pane("greedy", 100.0, [1, 2]),
        _pane("pld:fixed_draft=10", 50.0, [1, 3]),
    ]
    judged = {"pld": True, "greedy": True, "pld:fixed_draft=10": False}
    lanes = [Lane(Unreachable(label, ""), identical=same) for label, same in judged.items()]
    rows = summary_rows(panes, lanes)
    assert [r[0] for r in rows] == ["pld", "greedy", "pld:fixed_draft=10"]
    assert [r[2] for r in rows] == ["1.50×", "1.00×", "0.50×"]  # vs greedy, not the first pane
    assert [r[7] for r in rows] == ["identical ✓", "reference", "differs ✗"]


def _step(tokens, seconds, tail=False):
    return StepEvent(tuple(range(tokens)), "x" * tokens, 0, 0, "greedy", seconds, tail)


def test_replay_timeline_places_steps_at_their_measured_moments():
    steps = [_step(1, 0.125), _step(3, 0.25), _step(1, 0.125), _step(0, 0.0, tail=True)]
    timeline = Timeline.of_run(steps, prefill_seconds=0.25)
    assert timeline.times == (0.375, 0.625, 0.75, 0.75)
    assert timeline.end == 0.75
    # nothing during the prefill; a step shows from its own moment on; the tail with the last
    moments = (0.0, 0.374, 0.375, 0.5, 0.74, 0.75, 9.0)
    assert [timeline.shown_at(t) for t in moments] == [0, 0, 1, 1, 2, 4, 4]
    assert Timeline.of_run([], 0.2).end == 0.0
    assert finishing_places([0.9, None, 0.4, 0.6]) == [3, None, 1, 2]


class _CpuClock:
    """The UI thread's CPU time, moved by the test: what each flush and its repaint cost."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_flushes_slow_down_where_repaints_are_dear_and_not_where_they_are_cheap():
    from specchat.app.tui.streaming import FASTEST_FLUSH, SLOWEST_FLUSH, FlushPacer

    cheap_clock, dear_clock = _CpuClock(), _CpuClock()
    cheap = FlushPacer(share=0.05, cpu_clock=cheap_clock)
    dear = FlushPacer(share=0.05, cpu_clock=dear_clock)
    for _ in range(20):
        cheap_clock.now += 0.001  # 1 ms of UI work per flush: 20 flushes a second stay well in
        dear_clock.now += 0.010  # 10 ms: 20 a second would take a fifth of a core
        cheap_interval, dear_interval = cheap.next_interval(), dear.next_interval()
    assert cheap_interval == FASTEST_FLUSH
    assert 0.010 / dear_interval == pytest.approx(0.05, rel=0.01)  # the UI's share, held
    # a terminal so slow that even the slowest pace costs more still shows text 4 times a second
    dear_clock.now += 1.0
    assert dear.next_interval() == SLOWEST_FLUSH


def test_a_long_first_question_makes_a_title_cut_at_a_word_end():
    from specchat.app.conversation import TITLE_LENGTH, chat_title

    title = chat_title("Explain how a refrigerator keeps food cold using the vapour cycle")
    assert title == "Explain how a refrigerator keeps food cold…"
    assert len(title) <= TITLE_LENGTH
    assert chat_title("  Short   question ") == "Short question"
    assert len(chat_title("x" * 100)) == TITLE_LENGTH  # one long word is cut inside it


def test_the_drafts_view_never_claims_a_negative_share_realised():
    from specchat.answer_steps import DraftFigures
    from specchat.app.drafts_view import summary_lines
    from specchat.metrics.oracle import OracleFigures

    slower = DraftFigures(
        tokens=50, steps=50, drafted=40, accepted=2, rejected=38, pass_seconds=0.2,
        costs_from="measured pass costs", modelled_speedup=0.98,
        oracle=OracleFigures(seconds=0.9, plain_seconds=1.0, copyable=0.1),
    )  # fmt: skip
    assert slower.efficiency is not None and slower.efficiency < 0
    text = "\n".join(summary_lines(slower, None))
    assert "%" not in text.split("oracle:")[1].split("·")[1]
    assert "none of it realised" in text


def test_a_table_that_fits_80_columns_is_printed_whole():
    """`compare | cat` (80 columns): the compare table fits, so it stays one table."""
    import io

    from rich.console import Console

    from specchat.app.compare import COLUMNS
    from specchat.tables import print_table

    rows = [
        ["greedy", "251.3", "1.00×", "—", "—", "1.00", "0%", "128", "—"],
        ["suffix", "402.9", "1.60×", "1.91×", "0.66", "1.73", "58%", "128", "yes"],
    ]
    out = io.StringIO()
    print_table(Console(file=out, width=80), "compare · SmolLM2 · int4 cpu avx512", COLUMNS, rows)
    text = out.getvalue()
    assert "(1/2)" not in text and "exact" in text and "yes" in text
    assert max(len(line) for line in text.splitlines()) <= 80
    narrow = io.StringIO()  # where it does not fit, it is split, every cell whole
    print_table(Console(file=narrow, width=50), "compare", COLUMNS, rows)
    assert "(1/" in narrow.getvalue() and "402.9" in narrow.getvalue()


def test_the_status_line_says_whose_figures_it_shows():
    figures = Figures(decoder="suffix", answer_by=("beam",))
    assert "by beam" in str(status_text(figures, "model"))
    figures = Figures(decoder="suffix")
    figures.add(StepEvent((1,), "a", 0, 0, "suffix", 0.01))
    assert " by " not in str(status_text(figures, "model"))


def test_a_folded_file_counts_its_lines_as_a_person_writes_them():
    from specchat.app.tui.widgets.message import attachment_line
    from specchat.attachments import Attachment

    one = Attachment("q.txt", "Name a colour.\n").block()
    two = Attachment("m.py", "def add(a, b):\n    return a + b\n").block()
    assert attachment_line("q.txt", one, shown=False).plain == "▸ q.txt · 1 line  (o: show)"
    assert attachment_line("m.py", two, shown=False).plain == "▸ m.py · 2 lines  (o: show)"


def test_counts_read_as_a_person_writes_them():
    from specchat.wording import counted

    assert [counted(n, "step") for n in (0, 1, 2)] == ["0 steps", "1 step", "2 steps"]
