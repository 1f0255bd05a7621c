"""A tiny vision-language checkpoint built locally from the bundled model: an Idefics3 (SmolVLM) config whose text
model is SmolLM2-135M, a small vision encoder, and SmolLM2's tokenizer with the image tokens added. Nothing is
downloaded; vLLM reads it as any checkpoint (the configuration alone is enough to learn what the model reads)."""

from __future__ import annotations

import json
from pathlib import Path

IMAGE_TOKENS = ["<fake_token_around_image>", "<image>", "<end_of_utterance>", "<global-img>",
                *(f"<row_{row}_col_{col}>" for row in range(1, 7) for col in range(1, 7))]
VISION = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1, "num_attention_heads": 2,
          "image_size": 64, "patch_size": 16}
IMAGE_SEQ_LEN = 4  # (64 / 16)^2 patches, merged 2 x 2 by the connector


def build_tiny_vlm_config(text_model: Path, out: Path) -> Path:
    """Config, tokenizer and processor of the tiny VLM in `out` (no weights)."""
    from transformers import AutoTokenizer, Idefics3Config, Idefics3ImageProcessorPil, Idefics3Processor

    tokenizer = AutoTokenizer.from_pretrained(text_model)
    tokenizer.add_special_tokens({"additional_special_tokens": IMAGE_TOKENS})
    text_config = json.loads((text_model / "config.json").read_text())
    text_config["vocab_size"] = len(tokenizer)
    config = Idefics3Config(text_config=text_config, vision_config=VISION, scale_factor=2, pad_token_id=2,
                            image_token_id=tokenizer.convert_tokens_to_ids("<image>"), tie_word_embeddings=True)
    config.save_pretrained(out)
    images = Idefics3ImageProcessorPil(do_image_splitting=False, size={"longest_edge": VISION["image_size"]},
                                       max_image_size={"longest_edge": VISION["image_size"]})
    Idefics3Processor(image_processor=images, tokenizer=tokenizer, image_seq_len=IMAGE_SEQ_LEN).save_pretrained(out)
    return out


def build_tiny_vlm(text_model: Path, out: Path) -> Path:
    """The tiny VLM with weights: the bundled model's own as its text model (the image tokens' embeddings are
    the mean of the others), a randomly initialized vision encoder and connector (seeded: the same every time)."""
    import torch
    from safetensors.torch import load_file
    from transformers import Idefics3Config, Idefics3ForConditionalGeneration

    build_tiny_vlm_config(text_model, out)
    torch.manual_seed(0)
    model = Idefics3ForConditionalGeneration(Idefics3Config.from_pretrained(out))
    text = {f"model.text_model.{key.removeprefix('model.')}": value
            for key, value in load_file(text_model / "model.safetensors").items() if key.startswith("model.")}
    embeddings = text["model.text_model.embed_tokens.weight"]
    grown = model.state_dict()["model.text_model.embed_tokens.weight"].clone()
    grown[: len(embeddings)] = embeddings
    grown[len(embeddings):] = embeddings.mean(dim=0)
    text["model.text_model.embed_tokens.weight"] = grown
    missing, unexpected = model.load_state_dict(text, strict=False)
    assert not unexpected and all("vision" in key or "connector" in key or key == "lm_head.weight" for key in missing)
    model.tie_weights()
    model.save_pretrained(out)
    return out
