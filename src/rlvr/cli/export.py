"""``rlvr export CHECKPOINT OUT``: a checkpoint as a plain HF model directory (LoRA merged)."""

from __future__ import annotations

from rlvr.cli._common import add_common, error


def run(ns) -> int:
    from rlvr.learner.export import ExportError, export_checkpoint

    try:
        out = export_checkpoint(ns.checkpoint, ns.out, gguf=ns.gguf, overwrite=ns.overwrite)
    except ExportError as e:
        error(e)
        return 2
    print(f"exported {ns.checkpoint} to {out} (load it with transformers.AutoModelForCausalLM.from_pretrained"
          f"({str(out)!r}){'; llama.cpp: ' + str(out / 'model.gguf') if ns.gguf else ''})")
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("export", help="write a checkpoint as a plain HF model directory (LoRA merged)",
                       description="Write the policy of an rlvr checkpoint (<run>/checkpoints/step-N, or a run "
                                   "directory: its latest checkpoint) as a Hugging Face model directory: "
                                   "safetensors weights (LoRA merged), config, tokenizer and "
                                   "generation_config.json, loadable by transformers without rlvr.")
    p.add_argument("checkpoint", help="checkpoint directory, or a run directory (latest checkpoint)")
    p.add_argument("out", help="output directory (must not exist or be empty, unless --overwrite)")
    p.add_argument("--gguf", action="store_true",
                   help="also write OUT/model.gguf (float32) for llama.cpp (Llama-architecture models)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing OUT")
    add_common(p)
    p.set_defaults(func=run)
