"""Learn a joint sentencepiece model and encode text with it (fairseq's scripts/ are
not in its wheel, so the examples carry this small replacement).

    python sentencepiece_bpe.py train --input a.txt b.txt --model-prefix spm --vocab-size 8000
    python sentencepiece_bpe.py encode --model spm.model < raw.txt > pieces.txt
"""

import argparse
import sys

import sentencepiece as spm


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    train = sub.add_parser("train", help="learn a joint model on the given text files")
    train.add_argument("--input", nargs="+", required=True)
    train.add_argument("--model-prefix", required=True)
    train.add_argument("--vocab-size", type=int, default=8000)
    train.add_argument("--model-type", default="unigram", choices=["unigram", "bpe"])
    encode = sub.add_parser("encode", help="encode stdin to space-separated pieces")
    encode.add_argument("--model", required=True)
    args = parser.parse_args()

    if args.command == "train":
        spm.SentencePieceTrainer.train(
            input=",".join(args.input),
            model_prefix=args.model_prefix,
            vocab_size=args.vocab_size,
            model_type=args.model_type,
            character_coverage=1.0,
            # fairseq's dictionary adds its own specials; keep sentencepiece's out
            bos_id=-1,
            eos_id=-1,
            pad_id=-1,
            unk_id=0,
            # infilling templates write <mask> for each token to generate: keep it whole
            user_defined_symbols=["<mask>"],
        )
        return
    processor = spm.SentencePieceProcessor(model_file=args.model)
    for line in sys.stdin:
        sys.stdout.write(" ".join(processor.encode(line.strip(), out_type=str)) + "\n")


if __name__ == "__main__":
    main()
