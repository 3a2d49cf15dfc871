"""Beam search with the scoring of transformers' `generate(num_beams=…)`, streaming what is sure.

Every step evaluates all live beams' uncommitted suffixes as one tree block, so beams cost one pass
per step and no per-beam cache copies. The text shown so far is the prefix every live beam and every
kept finished hypothesis share: it can no longer change, whichever hypothesis wins. Where the runtime
keeps a tree's rows from pass to pass (`Backend.evaluate_more`), a step evaluates only the token each
beam grew: beams that disagree for long (a story whose beams repeat a sentence in turns) made the
whole tree hundreds of rows a pass, 15 tokens a second where greedy runs 300, and past 512 rows
the int4 runtime refused the block.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specchat.backends.base import Backend, Block
from specchat.decoding.base import Decoder
from specchat.decoding.params import Param
from specchat.decoding.sampling import Sampler
from specchat.decoding.sources import NO_SOURCES, DraftSources
from specchat.decoding.step import Step

_NEG = -1.0e9
_WHOLE_ROWS = 128  # rows a pass takes of a tree evaluated whole: its logits are rows × vocab


@dataclass
class _Hypothesis:
    tokens: tuple[int, ...]  # after the committed context (pending token excluded)
    score: float


def _log_softmax(row: np.ndarray) -> np.ndarray:
    row = row.astype(np.float64)
    shifted = row - row.max()
    return shifted - np.log(np.exp(shifted).sum())


class BeamSearchDecoder(Decoder):
    name = "beam"
    key = "f4"
    description = "beam search; streams the prefix all beams share"
    params = (
        Param("num_beams", int, 4, "beams kept at each step", minimum=1, maximum=64),
        Param(
            "length_penalty",
            float,
            1.0,
            "score / length**penalty; > 0 favours longer answers",
            minimum=-10,
            maximum=10,
        ),
    )
    greedy_family = False
    takes_temperature = False

    def __init__(self, **values: object) -> None:
        super().__init__(**values)
        self.num_beams = int(values["num_beams"])
        self.length_penalty = float(values["length_penalty"])
        # whether the runtime last decoded on evaluates a tree in parts (evaluate_more on rows
        # whose parents are rows of the same part): int4 does; llama.cpp only where the tree's
        # branches fit its streams, and transformers never
        self._in_parts: tuple[Backend, bool] | None = None
        self.reset([])

    def reset(self, context: list[int], sources: DraftSources = NO_SOURCES) -> None:
        self._running = [_Hypothesis((), 0.0)]
        self._finished: list[_Hypothesis] = []
        self._generated = 0  # tokens the beams have grown since reset (HF's cur_len - prompt_len)
        self._heuristic_open = True
        # the tree the runtime holds since the last commit, and its rows by prefix
        self._held: tuple[Block, dict[tuple[int, ...], int]] | None = None

    def _tree(self, pending: int) -> tuple[Block, dict[tuple[int, ...], int]]:
        tokens, parents, node_of = [pending], [-1], {(): 0}
        for hyp in self._running:
            for depth in range(1, len(hyp.tokens) + 1):
                prefix = hyp.tokens[:depth]
                if prefix not in node_of:
                    node_of[prefix] = len(tokens)
                    tokens.append(prefix[-1])
                    parents.append(node_of[prefix[:-1]])
        return Block(tuple(tokens), tuple(parents)), node_of

    def _grown(self) -> tuple[Block, dict[tuple[int, ...], int], int] | None:
        """The held tree with a row for each live beam's newest token, its rows by prefix and
        how many rows it held; None where a beam's newest token is not new."""
        if self._held is None:
            return None
        held, node_of = self._held
        tokens, parents, node_of = list(held.tokens), list(held.parents), dict(node_of)
        for hyp in self._running:
            parent = node_of.get(hyp.tokens[:-1]) if hyp.tokens else None
            if parent is None or hyp.tokens in node_of:
                return None
            node_of[hyp.tokens] = len(tokens)
            tokens.append(hyp.tokens[-1])
            parents.append(parent)
        return Block(tuple(tokens), tuple(parents)), node_of, len(held)

    def _evaluate(self, target: Backend, pending: int):
        """The tree of the live beams evaluated (grown by a row a beam where the runtime holds
        the tree, else whole), its rows by prefix, and each live beam's logits row."""
        grown = self._grown()
        if grown is not None:
            block, node_of, held = grown
            logits = target.evaluate_more(block, held)
            if logits is not None:
                self._held = block, node_of
                return node_of, [logits[node_of[hyp.tokens] - held] for hyp in self._running]
        block, node_of = self._tree(pending)
        wanted = {node_of[hyp.tokens] for hyp in self._running}
        rows = self._whole(target, block, wanted)
        self._held = block, node_of
        return node_of, [rows[node_of[hyp.tokens]] for hyp in self._running]

    def _whole(self, target: Backend, block: Block, wanted: set[int]) -> dict[int, np.ndarray]:
        """The `wanted` rows' logits of `block` evaluated whole: `_WHOLE_ROWS` rows a pass
        where the runtime evaluates a tree in parts, else in one pass."""
        if len(block) <= _WHOLE_ROWS or self._in_parts == (target, False):
            logits = target.evaluate(block)
            return {i: logits[i] for i in wanted}
        rows: dict[int, np.ndarray] = {}
        for start in range(0, len(block), _WHOLE_ROWS):
            end = min(len(block), start + _WHOLE_ROWS)
            part = Block(block.tokens[:end], block.parents[:end])
            logits = target.evaluate_more(part, start) if start else target.evaluate(part)
            if logits is None:  # not in parts: learned once, the whole in one pass
                self._in_parts = (target, False)
                return self._whole(target, block, wanted)
            rows.update((i, logits[i - start]) for i in wanted if start <= i < end)
        return rows

    def step(self, target: Backend, context: list[int], sampler: Sampler, room: int) -> Step:
        node_of, beam_logits = self._evaluate(target, context[-1])
        eos = target.eos_ids
        k = self.num_beams
        # Scores of every continuation of every live beam, best first (HF: top 2k over beams×vocab).
        keep = max(2, 1 + len(eos)) * k
        candidates: list[tuple[float, int, int]] = []
        for b, hyp in enumerate(self._running):
            scores = _log_softmax(beam_logits[b]) + hyp.score
            top = np.argpartition(-scores, keep)[:keep]
            candidates.extend((float(scores[t]), b, int(t)) for t in top)
        candidates.sort(key=lambda c: -c[0])
        candidates = candidates[:keep]
        length = self._generated + 1
        # `room` counts what may still be emitted; every live beam holds the same unemitted length.
        at_limit = len(self._running[0].tokens) + 1 >= room
        running: list[_Hypothesis] = []
        for rank, (score, b, token) in enumerate(candidates):
            tokens = self._running[b].tokens + (token,)
            done = at_limit or token in eos
            if done:
                if rank < k and self._heuristic_open:
                    self._finished.append(_Hypothesis(tokens, score / length**self.length_penalty))
            elif len(running) < k:
                running.append(_Hypothesis(tokens, score))
        self._finished = sorted(self._finished, key=lambda h: -h.score)[:k]
        self._running = running
        self._generated = length
        best_running = running[0].score if running else _NEG
        if len(self._finished) == k and (
            best_running / (self._generated**self.length_penalty) <= self._finished[-1].score
        ):
            self._heuristic_open = False
        over = at_limit or not running or not self._heuristic_open
        if over:
            best = self._finished[0].tokens if self._finished else running[0].tokens
            target.rollback(len(context) - 1)
            self._held = None
            return Step(tokens=best, final=True)
        return self._emit_shared_prefix(target, node_of)

    def _emit_shared_prefix(self, target: Backend, node_of: dict[tuple[int, ...], int]) -> Step:
        hyps = self._running + self._finished
        shared = 0
        first = hyps[0].tokens
        while all(len(h.tokens) > shared and h.tokens[shared] == first[shared] for h in hyps):
            shared += 1
        # Commit the pending root and the shared tokens that were evaluated, all but the last
        # emitted one, which becomes the new pending token.
        path = [0] + [node_of[first[:d]] for d in range(1, shared)]
        if shared == 0:  # the tree stays for the next step to grow (a runtime's next pass
            return Step(tokens=())  # otherwise drops it)
        target.commit(path)
        self._held = None  # the rows after the path went with the commit
        emitted = first[:shared]
        for h in hyps:
            h.tokens = h.tokens[shared:]
        return Step(tokens=emitted)
