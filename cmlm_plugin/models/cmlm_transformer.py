"""Conditional masked language model: a Transformer with a bidirectional decoder.

Ghazvininejad et al., "Mask-Predict: Parallel Decoding of Conditional Masked
Language Models", EMNLP 2019, Section 2. The encoder is fairseq's Transformer
encoder; the decoder is fairseq's Transformer decoder run without the causal mask
(every target position attends to every other) and with cross-attention to the
encoder; a length head (``length_head.py``) predicts the target length from the
encoder. Decoder inputs are the real target tokens only (no BOS/EOS), some of
them replaced by ``<mask>``.

The model owns one step (its inference paths: ``models.inference``); the loops live in
``cmlm_decoding``.
``forward`` returns a dict of loss terms that the criterion sums. With
``--ctc-upsample R`` the decoder is trained with CTC on a canvas of R times the source
length instead (``ctc.py``) and decodes in one pass; ``--ctc-cmlm-weight W`` adds the
CMLM loss on the masked target (weight W) so that the same decoder can refine its CTC
output with Mask-Predict (Mask-CTC, Higuchi et al., Interspeech 2020). With
``--insert-causal-attn`` every decoder layer also has a causal self-attention after its
bidirectional one (``causal_sublayer.py``; CMLMC, Huang et al., ICLR 2022).
"""

from typing import Dict, Optional, Tuple

import torch
from fairseq.models import register_model, register_model_architecture
from fairseq.models.transformer import TransformerDecoder, TransformerModel
from fairseq.models.transformer.transformer_legacy import base_architecture
from fairseq.modules.transformer_sentence_encoder import init_bert_params
from torch import Tensor

from ..errors import CMLMPluginError
from ..generation.templates import TemplateBPE
from ..symbols import mask_index
from .causal_sublayer import CausalSublayerDecoderLayer
from .ctc import CANVASES, best_alignment, canvas_lengths, ctc_nll, source_canvas
from .frames import FRAMES, LENGTH_SOURCES, LengthTokenEncoder, SourceBosEncoder, add_frame
from .length_head import LengthHead

MODEL_NAME = "cmlm_plugin_transformer"


class BidirectionalDecoder(TransformerDecoder):
    """fairseq's Transformer decoder with full (non-causal) self-attention.

    ``decoder_frame`` (``frames.py``) wraps the input in BOS/EOS for converted
    checkpoints; inputs and outputs stay ``B x T`` for the ``T`` target positions.
    """

    def __init__(self, args, dictionary, embed_tokens, no_encoder_attn=False):
        super().__init__(args, dictionary, embed_tokens, no_encoder_attn=no_encoder_attn)
        self.frame = getattr(args, "decoder_frame", None) or "none"

    def forward(self, prev_output_tokens, encoder_out=None, features_only=False, **unused):
        d = self.dictionary
        framed, real = add_frame(
            prev_output_tokens, self.frame, d.pad(), d.bos(), d.eos()
        )  # B x T'
        features, extra = self.extract_features(
            framed, encoder_out=encoder_out, full_context_alignment=True
        )  # B x T' x C
        features = features[:, real]  # B x T x C
        if features_only:
            return features, extra
        return self.output_layer(features), extra  # B x T x V

    def build_decoder_layer(self, args, no_encoder_attn=False):
        if getattr(self.args, "insert_causal_attn", False):  # args: fairseq's layer config
            return CausalSublayerDecoderLayer(args, no_encoder_attn=no_encoder_attn)
        return super().build_decoder_layer(args, no_encoder_attn=no_encoder_attn)


@register_model(MODEL_NAME)
class CMLMPluginModel(TransformerModel):
    def __init__(self, args, encoder, decoder):
        super().__init__(args, encoder, decoder)
        self.mask_idx = mask_index(decoder.dictionary)
        self.ctc_upsample = getattr(args, "ctc_upsample", 0) or 0  # 0: the CMLM objective
        self.ctc_canvas_kind = getattr(args, "ctc_canvas", None) or "source"
        if self.ctc_upsample < 0:
            raise CMLMPluginError(
                f"--ctc-upsample must be >= 0 (0: the CMLM objective; 2 or 3 for CTC), "
                f"got {self.ctc_upsample}"
            )
        self.ctc_cmlm_weight = getattr(args, "ctc_cmlm_weight", 0.0) or 0.0  # 0: CTC only
        if self.ctc_cmlm_weight < 0 or (self.ctc_cmlm_weight and not self.ctc_upsample):
            raise CMLMPluginError(
                "--ctc-cmlm-weight adds the CMLM loss to a CTC model: it must be >= 0 and "
                f"needs --ctc-upsample (got {self.ctc_cmlm_weight} with --ctc-upsample "
                f"{self.ctc_upsample})"
            )
        if getattr(args, "insert_causal_attn", False) and self.ctc_upsample:
            raise CMLMPluginError(
                "--insert-causal-attn is for the CMLM objective; a CTC canvas is padded on "
                "the left, where a causal mask leaves no key: drop one of the two"
            )
        self.length_head = LengthHead(
            args.encoder_embed_dim, args.length_classes, offset=args.length_offset
        )
        if not args.no_bert_init:
            self.apply(init_bert_params)

    @classmethod
    def hub_models(cls):
        return {}  # no downloadable checkpoints: from_pretrained takes local paths

    @classmethod
    def from_pretrained(
        cls, model_name_or_path, checkpoint_file="model.pt", data_name_or_path=".", **kwargs
    ):
        """fairseq's hub interface, encoding text with the task's BPE as fairseq-interactive does.

        fairseq's hub builds a plain BPE; the task's keeps task tags (``<2de>``) and
        infilling ``<mask>`` markup whole (``generation.templates.TemplateBPE``).
        """
        hub = super().from_pretrained(
            model_name_or_path, checkpoint_file, data_name_or_path, **kwargs
        )
        hub.bpe = TemplateBPE(hub.bpe, hub.task.target_dictionary, hub.task.task_tags)
        return hub

    @staticmethod
    def add_args(parser):
        TransformerModel.add_args(parser)
        parser.add_argument(
            "--length-classes",
            type=int,
            metavar="C",
            help="number of target-length classes predicted from the encoder "
            "(lengths 0..C-1, or offsets -C/2..C/2-1 with --length-offset)",
        )
        parser.add_argument(
            "--ctc-upsample",
            type=int,
            metavar="R",
            help="train the decoder with CTC on a canvas of R x the source length "
            "(0: the CMLM objective; 2 is enough for Multi30k's distilled targets); such "
            "a model decodes in one pass, without the length head",
        )
        parser.add_argument(
            "--ctc-cmlm-weight",
            type=float,
            metavar="W",
            help="with --ctc-upsample: also train the CMLM objective on the masked target, "
            "its loss weighted W against CTC's (0: CTC only), so that the model can refine "
            "its CTC output with Mask-Predict (--iter-decode-max-iter T > 1; Mask-CTC)",
        )
        parser.add_argument(
            "--ctc-canvas",
            choices=CANVASES,
            help="decoder input of CTC training and decoding: <mask> at every position "
            "(mask; the default with --ctc-cmlm-weight) or each source token repeated R "
            "times (source, the default otherwise: a uniform copy of the source as in Gu et "
            "al. 2018; needs a joined dictionary)",
        )
        parser.add_argument(
            "--length-offset",
            action="store_true",
            help="predict target length minus source length instead of the length",
        )
        parser.add_argument(
            "--no-bert-init",
            action="store_true",
            help="keep fairseq's Transformer initialisation instead of BERT's N(0, 0.02)",
        )
        parser.add_argument(
            "--decoder-frame",
            choices=FRAMES,
            help="symbols around the decoder input: none (the paper's CMLM), bos-eos "
            "(fairseq's cmlm_transformer, whose sources also start with <s>) or eos (the "
            "original Mask-Predict code); set by cmlm-convert for converted checkpoints",
        )
        parser.add_argument(
            "--insert-causal-attn",
            action="store_true",
            help="every decoder layer gains a causal self-attention after its bidirectional "
            "one (CMLMC's insertCausalSelfAttn, Huang et al. 2022); off: the paper's CMLM",
        )
        parser.add_argument(
            "--length-source",
            choices=LENGTH_SOURCES,
            help="length prediction from mean-pooled encoder states, or from a LENGTH "
            "token prepended to the source (the original Mask-Predict code)",
        )

    @classmethod
    def build_encoder(cls, args, src_dict, embed_tokens):
        if args.length_source == "length-token":
            return LengthTokenEncoder(args, src_dict, embed_tokens)
        if args.decoder_frame == "bos-eos":  # fairseq's translation_lev: <s> on both sides
            return SourceBosEncoder(args, src_dict, embed_tokens)
        return super().build_encoder(args, src_dict, embed_tokens)

    @classmethod
    def build_decoder(cls, args, tgt_dict, embed_tokens):
        return BidirectionalDecoder(
            args,
            tgt_dict,
            embed_tokens,
            no_encoder_attn=getattr(args, "no_cross_attention", False),
        )

    def load_state_dict(self, state_dict, strict=True, model_cfg=None, args=None):
        """fairseq's loader, after checking that the checkpoint's vocabulary fits the data."""
        for side, name in (("source", "encoder"), ("target", "decoder")):
            saved = state_dict.get(f"{name}.embed_tokens.weight")  # V x C
            size = getattr(self, name).embed_tokens.num_embeddings
            if saved is not None and saved.size(0) != size:
                raise CMLMPluginError(
                    f"the checkpoint's {side} vocabulary has {saved.size(0)} symbols but "
                    f"the data's dictionary has {size} (with <mask>): use the binarized "
                    "data (dict.*.txt) the model was trained with"
                )
        return super().load_state_dict(state_dict, strict=strict, model_cfg=model_cfg, args=args)

    def length_logits(self, encoder_out: Dict) -> Tensor:
        """``B x C`` length-class logits of an encoder output."""
        if "length_state" in encoder_out:  # LENGTH-token encoder
            return self.length_head.proj(encoder_out["length_state"][0])  # B x C
        padding_mask = encoder_out["encoder_padding_mask"][0]  # B x S
        return self.length_head(encoder_out["encoder_out"][0], padding_mask)  # B x C

    def predict_length(self, encoder_out: Dict) -> Dict[str, Tensor]:
        """Length log-probabilities ``B x C`` and the length of each class ``B x C``."""
        padding_mask = encoder_out["encoder_padding_mask"][0]  # B x S
        logits = self.length_logits(encoder_out)  # B x C
        source_lengths = (~padding_mask).sum(dim=1)  # B
        return {
            "logprobs": torch.log_softmax(logits.float(), dim=-1),
            "class_lengths": self.length_head.class_lengths(source_lengths),
        }

    def decoder_logits(
        self, tokens: Tensor, encoder_out: Dict, where: Optional[Tensor] = None
    ) -> Tensor:
        """One decoding step: ``N x L`` tokens (with ``<mask>``) -> ``N x L x V`` logits.

        With ``where`` (``N x L`` bool) only the ``M`` positions it marks are projected
        onto the vocabulary: ``M x V`` logits (fixed tokens need no new distribution).
        """
        features, _ = self.decoder(tokens, encoder_out=encoder_out, features_only=True)
        if where is not None:
            features = features[where]  # M x C
        return self.decoder.output_layer(features)  # N x L x V, or M x V

    def forward(
        self,
        src_tokens: Tensor,
        src_lengths: Tensor,
        prev_output_tokens: Tensor,
        tgt_tokens: Optional[Tensor] = None,
        revise=None,
        **unused,
    ):
        """Training forward: loss terms for the masked positions and the length.

        ``prev_output_tokens`` is the noisy target (``B x T``, real tokens and
        ``<mask>``, right-padded); ``tgt_tokens`` the clean one. The output
        projection runs only at the positions the loss covers: the masked ones, or
        those ``revise`` returns. ``revise(prev, predicted) -> (input, loss_positions)``
        (glancing, self-correction: ``training.second_pass``) gets the tokens a first
        pass without gradients predicts at the masked positions and returns the input
        of the trained pass.
        """
        encoder_out = self.encoder(src_tokens, src_lengths=src_lengths)
        padding_mask = encoder_out["encoder_padding_mask"][0]  # B x S
        length_logits = self.length_logits(encoder_out)  # B x C
        if self.ctc_upsample:
            terms = self.ctc_forward(src_tokens, encoder_out, length_logits, tgt_tokens, revise)
            if self.ctc_cmlm_weight and tgt_tokens is not None:  # Mask-CTC's joint loss
                masked = prev_output_tokens.eq(self.mask_idx)  # B x T
                terms["cmlm"] = {
                    "out": self.decoder_logits(prev_output_tokens, encoder_out, masked),  # M x V
                    "tgt": tgt_tokens[masked],  # M
                    "weight": self.ctc_cmlm_weight,
                }
            return terms
        loss_positions = prev_output_tokens.eq(self.mask_idx)  # B x T
        if revise is not None:
            predicted = self.first_pass(prev_output_tokens, encoder_out)  # B x T
            prev_output_tokens, loss_positions = revise(prev_output_tokens, predicted)
        features, _ = self.decoder(
            prev_output_tokens, encoder_out=encoder_out, features_only=True
        )  # B x T x C
        word_logits = self.decoder.output_layer(features[loss_positions])  # M x V
        terms = {"word_ins": {"out": word_logits}, "length": {"out": length_logits}}
        if tgt_tokens is not None:
            pad, eos = self.decoder.dictionary.pad(), self.decoder.dictionary.eos()
            target_lengths = (tgt_tokens.ne(pad) & tgt_tokens.ne(eos)).sum(dim=1)  # B
            source_lengths = (~padding_mask).sum(dim=1)  # B
            terms["word_ins"]["tgt"] = tgt_tokens[loss_positions]  # M
            terms["length"]["tgt"] = self.length_head.target_classes(
                target_lengths, source_lengths
            )  # B
        return terms

    def ctc_canvas(self, src_tokens: Tensor) -> Tensor:
        """``B x L`` decoder input of CTC, ``--ctc-upsample`` x the length of each source
        (``B x S``, EOS included): all ``<mask>``, or the source tokens repeated
        (``--ctc-canvas``), right-padded."""
        pad = self.decoder.dictionary.pad()
        lengths = canvas_lengths(src_tokens.ne(pad).sum(dim=1), self.ctc_upsample)  # B
        longest = int(lengths.max())
        if longest > self.decoder.max_positions():
            raise CMLMPluginError(
                f"a source of {longest // self.ctc_upsample} tokens needs {longest} decoder "
                f"positions at --ctc-upsample {self.ctc_upsample}, but the model has "
                f"{self.decoder.max_positions()}: raise --max-target-positions or filter "
                "long sentences (--max-source-positions)"
            )
        if self.ctc_canvas_kind == "source":
            return source_canvas(src_tokens, pad, self.ctc_upsample)[:, :longest]  # B x L
        real = torch.arange(longest, device=lengths.device)[None, :] < lengths[:, None]  # B x L
        return torch.full(real.shape, pad, device=lengths.device).masked_fill(real, self.mask_idx)

    def ctc_forward(
        self, src_tokens: Tensor, encoder_out: Dict, length_logits: Tensor, tgt_tokens=None,
        revise=None,
    ):  # fmt: skip
        """Loss terms of CTC training (``ctc.py``): ``word_ins`` holds the summed CTC NLL.

        ``revise(canvas, predicted, aligned, candidates) -> canvas`` (glancing:
        ``training.second_pass.ctc_glancing_input``) gets the first pass's symbols and
        the reference's best alignment (``ctc_first_pass``) and returns the trained
        pass's canvas.
        """
        canvas = self.ctc_canvas(src_tokens)  # B x L
        pad, eos = self.decoder.dictionary.pad(), self.decoder.dictionary.eos()
        lengths = canvas.ne(pad).sum(dim=1)  # B
        terms = {"word_ins": {}, "length": {"out": length_logits}}
        if tgt_tokens is None:
            return terms
        real = tgt_tokens.ne(pad) & tgt_tokens.ne(eos)  # B x T
        target_lengths = real.sum(dim=1)  # B
        if revise is not None:
            first = self.ctc_first_pass(canvas, lengths, encoder_out, tgt_tokens, target_lengths)
            canvas = revise(canvas, *first)  # B x L
        features, _ = self.decoder(canvas, encoder_out=encoder_out, features_only=True)
        lprobs = torch.log_softmax(self.decoder.output_layer(features).float(), dim=-1)  # B x L x V
        source_lengths = (~encoder_out["encoder_padding_mask"][0]).sum(dim=1)  # B
        nll = ctc_nll(lprobs, lengths, tgt_tokens, target_lengths, self.mask_idx)
        terms["word_ins"] = {"loss": nll, "count": int(target_lengths.sum())}
        terms["length"]["tgt"] = self.length_head.target_classes(
            target_lengths, source_lengths
        )  # B
        return terms

    @torch.no_grad()
    def ctc_first_pass(
        self,
        canvas: Tensor,
        lengths: Tensor,
        encoder_out: Dict,
        target: Tensor,
        target_lengths: Tensor,
    ) -> Tuple[Tensor, Tensor, Tensor]:
        """Glancing's first pass over a CTC canvas (``B x L``, ``lengths`` ``(B,)``), no
        gradients, dropout as in training: ``(predicted, aligned, candidates)``, ``B x L``
        each, the argmax symbol (or blank) of each position, the reference's best
        alignment, and the positions of rows that have one."""
        logits = self.decoder_logits(canvas, encoder_out).float()  # B x L x V
        lprobs = torch.log_softmax(logits, dim=-1)  # B x L x V
        aligned, possible = best_alignment(lprobs, lengths, target, target_lengths,
                                           self.mask_idx)  # fmt: skip
        real = torch.arange(canvas.size(1), device=canvas.device)[None, :] < lengths[:, None]
        return lprobs.argmax(dim=-1), aligned, real & possible[:, None]  # B x L each

    @torch.no_grad()
    def first_pass(self, tokens: Tensor, encoder_out: Dict) -> Tensor:
        """``B x T``: ``tokens`` with each ``<mask>`` replaced by the decoder's argmax
        (pad, BOS, EOS and ``<mask>`` excluded), no gradients; dropout as in training."""
        masked = tokens.eq(self.mask_idx)  # B x T
        logits = self.decoder_logits(tokens, encoder_out, masked).float()  # M x V
        dictionary = self.decoder.dictionary
        banned = [dictionary.pad(), dictionary.bos(), dictionary.eos(), self.mask_idx]
        logits[:, banned] = float("-inf")
        return tokens.masked_scatter(masked, logits.argmax(dim=-1))  # B x T


def _cmlm_defaults(args):
    args.encoder_learned_pos = getattr(args, "encoder_learned_pos", True)
    args.decoder_learned_pos = getattr(args, "decoder_learned_pos", True)
    args.share_all_embeddings = getattr(args, "share_all_embeddings", True)
    args.share_decoder_input_output_embed = getattr(args, "share_decoder_input_output_embed", True)
    args.activation_fn = getattr(args, "activation_fn", "gelu")
    args.dropout = getattr(args, "dropout", 0.3)
    args.length_classes = getattr(args, "length_classes", None) or 256
    args.length_offset = getattr(args, "length_offset", False)
    args.no_bert_init = getattr(args, "no_bert_init", False)
    args.decoder_frame = getattr(args, "decoder_frame", None) or "none"
    args.length_source = getattr(args, "length_source", None) or "mean-pool"
    args.ctc_upsample = getattr(args, "ctc_upsample", None) or 0
    args.insert_causal_attn = getattr(args, "insert_causal_attn", False)
    args.ctc_cmlm_weight = getattr(args, "ctc_cmlm_weight", None) or 0.0
    joint = "mask" if args.ctc_cmlm_weight else "source"  # the canvas a joint model learns on
    args.ctc_canvas = getattr(args, "ctc_canvas", None) or joint
    base_architecture(args)


@register_model_architecture(MODEL_NAME, "cmlm_plugin_base")
def cmlm_plugin_base(args):
    """The paper's base model: 6+6 layers, d=512, FFN 2048, 8 heads."""
    args.encoder_embed_dim = getattr(args, "encoder_embed_dim", 512)
    args.encoder_ffn_embed_dim = getattr(args, "encoder_ffn_embed_dim", 2048)
    args.encoder_layers = getattr(args, "encoder_layers", 6)
    args.encoder_attention_heads = getattr(args, "encoder_attention_heads", 8)
    args.decoder_layers = getattr(args, "decoder_layers", 6)
    args.decoder_attention_heads = getattr(args, "decoder_attention_heads", 8)
    _cmlm_defaults(args)


@register_model_architecture(MODEL_NAME, MODEL_NAME)
def cmlm_plugin_default(args):
    cmlm_plugin_base(args)


@register_model_architecture(MODEL_NAME, "cmlm_plugin_big")
def cmlm_plugin_big(args):
    """Transformer-big sizes: 6+6 layers, d=1024, FFN 4096, 16 heads."""
    args.encoder_embed_dim = getattr(args, "encoder_embed_dim", 1024)
    args.encoder_ffn_embed_dim = getattr(args, "encoder_ffn_embed_dim", 4096)
    args.encoder_attention_heads = getattr(args, "encoder_attention_heads", 16)
    args.decoder_attention_heads = getattr(args, "decoder_attention_heads", 16)
    cmlm_plugin_base(args)


@register_model_architecture(MODEL_NAME, "cmlm_plugin_small")
def cmlm_plugin_small(args):
    """A CPU-sized model for Multi30k: 3+3 layers, d=256, FFN 1024, 4 heads."""
    args.encoder_embed_dim = getattr(args, "encoder_embed_dim", 256)
    args.encoder_ffn_embed_dim = getattr(args, "encoder_ffn_embed_dim", 1024)
    args.encoder_layers = getattr(args, "encoder_layers", 3)
    args.encoder_attention_heads = getattr(args, "encoder_attention_heads", 4)
    args.decoder_layers = getattr(args, "decoder_layers", 3)
    args.decoder_attention_heads = getattr(args, "decoder_attention_heads", 4)
    args.dropout = getattr(args, "dropout", 0.1)
    cmlm_plugin_base(args)


@register_model_architecture(MODEL_NAME, "cmlm_plugin_tiny")
def cmlm_plugin_tiny(args):
    """For tests: 2+2 layers, d=64, FFN 128, 2 heads, 64 length classes."""
    args.encoder_embed_dim = getattr(args, "encoder_embed_dim", 64)
    args.encoder_ffn_embed_dim = getattr(args, "encoder_ffn_embed_dim", 128)
    args.encoder_layers = getattr(args, "encoder_layers", 2)
    args.encoder_attention_heads = getattr(args, "encoder_attention_heads", 2)
    args.decoder_layers = getattr(args, "decoder_layers", 2)
    args.decoder_attention_heads = getattr(args, "decoder_attention_heads", 2)
    args.dropout = getattr(args, "dropout", 0.1)
    args.length_classes = getattr(args, "length_classes", None) or 64
    cmlm_plugin_base(args)
