"""fairseq adapter for Mask-Predict decoding (Ghazvininejad et al., 2019, §3).

Encodes each source once, proposes the top-l lengths of the length head, expands
the encoder output to the l candidates (a gather, not a second encoder pass),
runs ``decoding.mask_predict`` on all candidates of the batch at once, keeps each
sentence's candidate with the highest mean log-probability and returns fairseq's
hypothesis dicts. The algorithm itself lives in ``cmlm_plugin.decoding``.

Flags (fairseq's generation options, with the paper's meaning):
``--iter-decode-max-iter T`` decoder passes (T = 1: single-pass NAT);
``--iter-decode-with-beam l`` length candidates; ``--iter-decode-force-max-iter``
spends all T passes on every sentence; ``--retain-iter-history`` and
``--print-step`` add the per-pass outputs and the pass count to the hypotheses.
"""

from typing import Dict, List

import torch
from torch import Tensor

from .decoding import length_candidates, mask_predict, select_best
from .symbols import mask_index

_NO_ENSEMBLE = "Mask-Predict decodes with one model: pass one checkpoint to --path (no ensembles)"


class MaskPredictGenerator:
    def __init__(
        self,
        tgt_dict,
        max_iter: int = 10,
        beam_size: int = 1,
        force_max_iter: bool = False,
        retain_history: bool = False,
    ):
        if max_iter < 1:
            raise ValueError(
                f"--iter-decode-max-iter is the number of decoder passes and must be "
                f">= 1, got {max_iter}"
            )
        if beam_size < 1:
            raise ValueError(
                f"--iter-decode-with-beam is the number of length candidates and must "
                f"be >= 1, got {beam_size}"
            )
        self.tgt_dict = tgt_dict
        self.max_iter = max_iter
        self.beam_size = beam_size
        self.force_max_iter = force_max_iter
        self.retain_history = retain_history
        self.pad = tgt_dict.pad()
        self.eos = tgt_dict.eos()  # read by fairseq-generate to strip outputs
        self.mask = mask_index(tgt_dict)
        # symbols a position may never be decoded as
        self.banned = sorted({self.pad, tgt_dict.bos(), self.eos, self.mask})

    @classmethod
    def from_args(cls, tgt_dict, models, args):
        generator = cls(
            tgt_dict,
            max_iter=getattr(args, "iter_decode_max_iter", 10),
            beam_size=getattr(args, "iter_decode_with_beam", 1),
            force_max_iter=getattr(args, "iter_decode_force_max_iter", False),
            retain_history=getattr(args, "retain_iter_history", False),
        )
        if len(models) > 1:
            raise ValueError(_NO_ENSEMBLE)
        for model in models:
            generator.check_model(model)
        return generator

    def check_model(self, model) -> None:
        if not hasattr(model, "predict_length"):
            raise ValueError(
                f"{type(model).__name__} is not a cmlm_plugin model: train it with "
                "--task cmlm --arch cmlm_plugin_base (or another cmlm_plugin_* arch)"
            )
        classes = model.length_head.num_classes
        if self.beam_size > classes:
            raise ValueError(
                f"--iter-decode-with-beam {self.beam_size} exceeds the model's "
                f"{classes} length classes"
            )

    @torch.no_grad()
    def generate(self, models, sample, prefix_tokens=None, constraints=None, **unused):
        if len(models) != 1:
            raise ValueError(_NO_ENSEMBLE)
        if prefix_tokens is not None or constraints is not None:
            raise ValueError("--prefix-size and --constraints are not supported by --task cmlm")
        model = models[0]
        self.check_model(model)
        model.eval()
        net_input = sample["net_input"]
        src_tokens = net_input["src_tokens"]  # B x S
        num_sentences = src_tokens.size(0)
        beam = self.beam_size

        encoder_out = model.encoder(src_tokens, src_lengths=net_input["src_lengths"])
        length = model.predict_length(encoder_out)
        max_length = model.decoder.max_positions()
        lengths, _ = length_candidates(
            length["logprobs"], length["class_lengths"], beam, max_length
        )  # B x beam
        lengths = lengths.reshape(-1)  # B*beam, candidates of a sentence contiguous
        order = torch.arange(num_sentences, device=src_tokens.device).repeat_interleave(beam)
        candidates_out = model.encoder.reorder_encoder_out(encoder_out, order)

        banned = torch.tensor(self.banned, device=src_tokens.device)

        def step(tokens: Tensor, rows) -> Tensor:
            enc = candidates_out
            if rows is not None:
                enc = model.encoder.reorder_encoder_out(candidates_out, rows)
            logits = model.decoder_logits(tokens, enc).float()  # n x L x V
            logits.index_fill_(-1, banned, float("-inf"))
            return torch.log_softmax(logits, dim=-1)  # n x L x V

        result = mask_predict(
            step,
            lengths,
            self.max_iter,
            self.mask,
            self.pad,
            force_max_iter=self.force_max_iter,
            retain_history=self.retain_history,
        )
        best = select_best(result.scores, beam)  # B
        return self._hypotheses(result, lengths, best)

    def _hypotheses(self, result, lengths: Tensor, best: Tensor) -> List[List[Dict]]:
        """fairseq's output format: one list holding one hypothesis per sentence."""
        # the loop below only slices finished tensors into per-sentence outputs
        tokens = result.tokens[best].cpu()  # B x L
        logprobs = result.token_logprobs[best].cpu()  # B x L
        scores = result.scores[best].cpu()
        steps = result.steps[best].cpu()
        kept = lengths[best].cpu()
        history = [h[best].cpu() for h in result.history]
        eos = torch.tensor([self.eos])
        hypos = []
        for i in range(best.numel()):
            n = int(kept[i])
            hypo = {
                "tokens": torch.cat([tokens[i, :n], eos]),
                "score": float(scores[i]),
                "positional_scores": logprobs[i, :n],
                "attention": None,
                "alignment": None,
                "steps": int(steps[i]),
            }
            if self.retain_history:
                hypo["history"] = [
                    {
                        "tokens": torch.cat([h[i, :n], eos]),
                        "score": 0.0,
                        "attention": None,
                        "alignment": None,
                    }
                    for h in history[: int(steps[i])]
                ]
            hypos.append([hypo])
        return hypos
