"""A tokenizer folder for the LLM fixture (random weights, 512-token vocabulary): a byte-level BPE of
exactly 512 tokens trained with `tokenizers` (so any text round trips), <s> = 1 and </s> = 2 as the
fixture's BOS / EOS, and a small chat template."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

VOCAB = 512
SPECIALS = ["<unk>", "<s>", "</s>"]          # ids 0, 1, 2: the fixture's get_bos_id 1, get_eos_id 2
CHAT_TEMPLATE = ("{{ bos_token }}{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}{{ eos_token }}\n"
                 "{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}")
# a template that renders tools as transformers passes them (names only: the fixture's context is
# short) and an assistant's earlier calls
TOOLS_CHAT_TEMPLATE = (
    "{{ bos_token }}{% if tools %}tools:{% for t in tools %} {{ t['function']['name'] }}{% endfor %}\n{% endif %}"
    "{% for m in messages %}{{ m['role'] }}: {% if m['tool_calls'] %}{% for c in m['tool_calls'] %}<tool_call>"
    "{{ {'name': c['function']['name'], 'arguments': c['function']['arguments']} | tojson }}</tool_call>"
    "{% endfor %}{% else %}{{ m['content'] }}{% endif %}{{ eos_token }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}")
CORPUS = [
    "Once upon a time there was a little cat who liked to play in the garden with a red ball.",
    "The dog ran to the park, and the children laughed when it jumped over the small fence.",
    "Tom and Lily went to the sea. They saw a big fish and a boat with a white sail.",
    "She said hello to the bird in the tree, and the bird sang a happy song for her.",
    "Grüße aus Köln, 東京 and 🐈: every byte of any text has a token here.",
]


def _corpus() -> list[str]:
    """The sentences, and their words recombined (seeded): enough pairs for 512 tokens."""
    import random
    rng = random.Random(0)
    words = " ".join(CORPUS).split()
    made = ["".join(rng.choice("etaoinshrdlucmfw") for _ in range(rng.randint(3, 8))) for _ in range(600)]
    return CORPUS * 10 + [" ".join(rng.choice(words + made) for _ in range(12)) for _ in range(600)]


def write_tokenizer_folder(folder: Path, chat_template: str = CHAT_TEMPLATE) -> Path:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(_corpus(), trainer=trainer)
    assert tok.get_vocab_size() == VOCAB, tok.get_vocab_size()
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps(
        {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}))
    (folder / "chat_template.jinja").write_text(chat_template)
    return folder


@pytest.fixture(scope="session")
def text_folder(tmp_path_factory) -> Path:
    """The fixture's tokenizer folder, trained once per session."""
    pytest.importorskip("tokenizers", reason="needs `tokenizers` (pip install -e '.[test]')")
    return write_tokenizer_folder(tmp_path_factory.mktemp("tokenizer"))


@pytest.fixture(scope="session")
def tools_text_folder(tmp_path_factory) -> Path:
    """The same tokenizer with a chat template that renders tools."""
    pytest.importorskip("tokenizers", reason="needs `tokenizers` (pip install -e '.[test]')")
    return write_tokenizer_folder(tmp_path_factory.mktemp("tokenizer_tools"), TOOLS_CHAT_TEMPLATE)
