"""The compiled scorer: the same rewards as ``model.score`` for every layout, head size and activation;
a library built once per machine and rebuilt when damaged; bad input and a missing compiler named.
The contract both CPU scorers keep is tested in test_cpu_scorers."""

from __future__ import annotations

import shutil
import time

import pytest
import torch

from orchrm import BradleyTerryModel, native
from orchrm.errors import ConfigError
from orchrm.native import NativeScorer

from ._scoring_helpers import LONG_PLAN, sharpen_attention
from ._scoring_helpers import texts as _texts

if not torch.backends.mkl.is_available():
    pytest.skip("NativeScorer runs on the MKL of PyTorch's x86-64 builds; this PyTorch has none", allow_module_level=True)
if not shutil.which("cc") and not shutil.which("gcc"):
    pytest.skip("NativeScorer compiles its forward pass with the machine's C compiler; none is installed", allow_module_level=True)


def _needs(gemm: str) -> None:
    if not native.library().orm_gemm_available(native.GEMMS.index(gemm)):
        pytest.skip(f"this PyTorch ({torch.__version__}) does not carry the {gemm!r} matrix kernel")


@pytest.fixture(params=native.GEMMS)
def gemm(request):
    """Each matrix kernel in turn (widths of 48 and 160 give oneDNN a last panel narrower than 64)."""
    _needs(request.param)
    return request.param


def _fitted(pairs, **kwargs) -> BradleyTerryModel:
    model = BradleyTerryModel(**kwargs)
    model.fit_tokenizer(list(pairs["prompt"]) + list(pairs["chosen"]) + list(pairs["rejected"]))
    return model.eval()


@pytest.fixture
def fresh_library(tmp_path, monkeypatch):
    """An empty library cache and no library loaded yet: the next scorer compiles."""
    monkeypatch.setenv("ORCHRM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(native, "_library", None)
    return tmp_path / "cache"


@pytest.mark.parametrize("architecture", ["shared_prompt", "joint"])
@pytest.mark.parametrize(
    "shape",
    [
        dict(),  # hidden 32, 2 heads of 16
        dict(hidden_dim=48, num_heads=4),  # heads of 12: not a multiple of the 16-float vectors
        dict(hidden_dim=128, num_heads=2),  # heads of 64: the loops unrolled for that size
        dict(hidden_dim=160, num_heads=1),  # a head of 160: values weighed 64 columns at a time
    ],
    ids=["heads of 16", "heads of 12", "heads of 64", "a head of 160"],
)
def test_rewards_match_the_pytorch_forward(pairs, tiny_model_kwargs, architecture, shape, gemm):
    model = _fitted(pairs, **{**tiny_model_kwargs, **shape, "architecture": architecture})
    prompts, actions = _texts(pairs)
    scorer = NativeScorer(model, gemm=gemm)
    torch.testing.assert_close(scorer.score(prompts, actions), model.score(prompts, actions), rtol=0, atol=1e-5)
    question, plans = prompts[0], actions[:8]
    torch.testing.assert_close(scorer.score(question, plans), model.score(question, plans), rtol=0, atol=1e-5)


@pytest.mark.parametrize("activation", ["relu", "gelu_new"])
def test_other_activations_match(pairs, tiny_model_kwargs, activation):
    model = _fitted(pairs, **tiny_model_kwargs)
    model.encoder.config.hidden_act = activation
    from transformers.activations import ACT2FN

    for layer in model.encoder.encoder.layer:
        layer.intermediate.intermediate_act_fn = ACT2FN[activation]
    prompts, actions = _texts(pairs, 6)
    torch.testing.assert_close(NativeScorer(model).score(prompts, actions), model.score(prompts, actions), rtol=0, atol=1e-5)


def test_sharp_attention_matches(pairs, tiny_model_kwargs):
    # attention logits spread over hundreds: the softmax must not overflow, underflow into NaN or
    # take a denormal path that changes the result
    model = _fitted(pairs, **tiny_model_kwargs)
    sharpen_attention(model)
    prompts, actions = _texts(pairs)
    got = NativeScorer(model).score(prompts, actions)
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got, model.score(prompts, actions), rtol=1e-4, atol=1e-4)


def test_threads_do_not_change_a_reward(trained_model, pairs, gemm):
    prompts, actions = _texts(pairs, 20)
    ref = NativeScorer(trained_model, threads=1, gemm=gemm).score(prompts, actions)
    got = NativeScorer(trained_model, threads=2, gemm=gemm).score(prompts, actions)
    torch.testing.assert_close(got, ref, rtol=0, atol=1e-5)


def test_minilm_matches(pairs, gemm):
    model = BradleyTerryModel(encoder="minilm", max_length=128, dropout=0.0)
    prompts, actions = _texts(pairs, 6)
    got = NativeScorer(model, gemm=gemm).score(prompts, actions)
    torch.testing.assert_close(got, model.score(prompts, actions), rtol=0, atol=1e-5)


def test_auto_takes_the_kernel_that_timed_faster(trained_model):
    _needs("onednn")
    scorer = NativeScorer(trained_model)
    assert set(scorer.gemm_times) == set(native.GEMMS)
    assert all(ms > 0 for ms in scorer.gemm_times.values())
    assert scorer.gemm == min(scorer.gemm_times, key=scorer.gemm_times.get)
    chosen = NativeScorer(trained_model, gemm="mkl")
    assert chosen.gemm == "mkl" and chosen.gemm_times == {}  # named: not timed


def test_auto_times_the_kernels_once_per_shape_and_thread_count(trained_model, monkeypatch):
    _needs("onednn")
    timings, real = [], native.gemm_times
    monkeypatch.setattr(native, "_timed", {})
    monkeypatch.setattr(native, "gemm_times", lambda *a, **k: timings.append(k["threads"]) or real(*a, **k))  # counts the real timer's calls
    first, again = NativeScorer(trained_model, threads=1), NativeScorer(trained_model, threads=1)
    assert timings == [1] and again.gemm_times == first.gemm_times and again.gemm == first.gemm
    NativeScorer(trained_model, threads=2)  # another thread count: timed again
    assert timings == [1, 2]


def test_the_kernel_timers_time_both_kernels_and_refuse_empty_sizes():
    _needs("onednn")
    assert all(native.matmul_ms(gemm, 64, reps=2) > 0 for gemm in native.GEMMS)
    assert set(native.gemm_times(32, 64, rows=8, reps=3)) == set(native.GEMMS)
    with pytest.raises(RuntimeError, match="a size or count below 1"):
        native.gemm_times(32, 64, rows=0)
    with pytest.raises(RuntimeError, match="a size or count below 1"):
        native.matmul_ms("mkl", 64, reps=0)


def test_an_unknown_kernel_is_named_before_anything_is_compiled(trained_model, fresh_library):
    with pytest.raises(ConfigError, match="gemm must be one of 'mkl', 'onednn', 'auto', got 'blas'"):
        NativeScorer(trained_model, gemm="blas")
    with pytest.raises(ConfigError, match="gemm must be one of 'mkl', 'onednn', got 'auto'"):
        native.matmul_ms("auto", 8)
    assert not fresh_library.exists()


def test_a_token_outside_the_tables_is_an_error_not_a_read_out_of_bounds(trained_model):
    scorer = NativeScorer(trained_model)
    batch = trained_model.pack(trained_model.tokenize(["What is 2 + 3?"]), trained_model.tokenize(["add them"]), [0])
    batch.input_ids[2] = trained_model.encoder.config.vocab_size + 5
    with pytest.raises(RuntimeError, match="token 2's id is outside the vocabulary"):
        scorer._run(batch)
    batch = trained_model.pack(trained_model.tokenize(["What is 2 + 3?"]), trained_model.tokenize(["add them"]), [0])
    batch.positions[-1] = 10_000
    with pytest.raises(RuntimeError, match=f"token {batch.num_tokens - 1}'s position"):
        scorer._run(batch)


def test_the_library_is_built_once_per_machine_and_reused(trained_model, fresh_library, monkeypatch, tmp_path):
    ref = NativeScorer(trained_model).score("What is 2 + 3?", ["add them", "guess"])
    (built,) = fresh_library.glob("native/*/liborchrm_score.so")
    stamp = built.stat().st_mtime_ns
    monkeypatch.setattr(native, "_library", None)  # a new process: loads the cached library
    monkeypatch.setenv("PATH", str(tmp_path / "no-compilers-here"))  # and could not compile one
    again = NativeScorer(trained_model).score("What is 2 + 3?", ["add them", "guess"])
    assert torch.equal(again, ref)
    assert list(fresh_library.glob("native/*/liborchrm_score.so")) == [built] and built.stat().st_mtime_ns == stamp


def test_a_cached_library_cut_short_is_built_again(trained_model, fresh_library, monkeypatch):
    # loading a truncated library would crash the process (SIGBUS): its checksum sends it back to the compiler
    ref = NativeScorer(trained_model).score("What is 2 + 3?", ["add them", "guess"])
    (built,) = fresh_library.glob("native/*/liborchrm_score.so")
    whole = built.read_bytes()
    cut = built.with_name("cut")  # as a crash would leave it (a new file: this process has the old one mapped)
    cut.write_bytes(whole[: len(whole) // 3])
    cut.replace(built)
    assert not native._intact(built)
    monkeypatch.setattr(native, "_library", None)
    assert torch.equal(NativeScorer(trained_model).score("What is 2 + 3?", ["add them", "guess"]), ref)
    assert native._intact(built) and built.stat().st_size == len(whole)


def test_flags_in_cc_make_a_build_of_their_own(trained_model, fresh_library, monkeypatch):
    NativeScorer(trained_model)
    monkeypatch.setattr(native, "_library", None)
    monkeypatch.setenv("CC", "cc -DORCHRM_ANOTHER_BUILD")
    NativeScorer(trained_model)
    assert len(list(fresh_library.glob("native/*/liborchrm_score.so"))) == 2
    monkeypatch.setattr(native, "_library", None)
    monkeypatch.setenv("CC", "   ")  # blank: as if unset, the first build again
    NativeScorer(trained_model)
    assert len(list(fresh_library.glob("native/*/liborchrm_score.so"))) == 2


def test_an_unwritable_cache_names_the_setting_to_change(trained_model, fresh_library, monkeypatch, tmp_path):
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    monkeypatch.setenv("ORCHRM_CACHE_DIR", str(a_file))
    with pytest.raises(ConfigError, match="cannot write its library cache.*ORCHRM_CACHE_DIR"):
        NativeScorer(trained_model)


def test_a_missing_compiler_names_the_fix(trained_model, fresh_library, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path / "no-compilers-here"))
    monkeypatch.delenv("CC", raising=False)
    with pytest.raises(ConfigError, match="found no C compiler.*install one.*OnnxScorer"):
        NativeScorer(trained_model)
    monkeypatch.setenv("CC", str(fresh_library / "no-such-cc"))
    with pytest.raises(ConfigError, match="no-such-cc.*does not run.*set CC.*OnnxScorer"):
        NativeScorer(trained_model)
    assert not list(fresh_library.glob("native/*/*.so"))


def test_a_failed_compile_shows_the_compiler_and_leaves_no_library(trained_model, fresh_library, monkeypatch):
    monkeypatch.setenv("CC", "cc -DORM_NO_SUCH_HEADER -include orchrm_no_such_header.h")
    with pytest.raises(ConfigError, match=r"(?s)compiling NativeScorer's forward pass failed.*orchrm_no_such_header\.h.*OnnxScorer"):
        NativeScorer(trained_model)
    assert not list(fresh_library.glob("native/*/*.so"))
    monkeypatch.delenv("CC")
    NativeScorer(trained_model)  # the next try compiles


@pytest.mark.parametrize("threads", [1, 2])  # 2: each call's own OpenMP team
def test_threads_can_score_with_one_scorer_at_once(trained_model, pairs, gemm, threads):
    # the C call releases the GIL and keeps its buffers per call (oneDNN its kernels per thread):
    # concurrent calls do not mix
    from concurrent.futures import ThreadPoolExecutor

    scorer = NativeScorer(trained_model, threads=threads, gemm=gemm)
    calls = [_texts(pairs.iloc[i:], 8) for i in range(0, 16, 2)]
    expected = [scorer.score(p, a) for p, a in calls]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda c: scorer.score(*c), calls * 3))
    for i, rewards in enumerate(got):
        assert torch.equal(rewards, expected[i % len(calls)])


def test_the_phase_profile_adds_up_to_the_calls_it_timed(trained_model, pairs):
    scorer = NativeScorer(trained_model)
    prompts, actions = _texts(pairs, 8)
    scorer.score(prompts, actions)  # not profiled
    assert scorer.profile()["chunks"] == 0  # starts it
    chunks = len(trained_model.scoring_texts(prompts, actions).chunks(scorer.model_config, scorer.max_tokens))
    start = time.perf_counter()
    for _ in range(3):
        scorer.score(prompts, actions)
    elapsed_ms = 1e3 * (time.perf_counter() - start)
    timed = scorer.profile(on=False)
    assert timed["chunks"] == 3 * chunks
    phases = [timed[p] for p in native.PHASES]
    assert all(ms >= 0 for ms in phases) and timed["linear layers"] > 0 and timed["attention"] > 0
    assert 0 < sum(phases) * timed["chunks"] <= elapsed_ms  # inside the calls, not more than they took
    scorer.score(prompts, actions)
    assert scorer.profile(on=False)["chunks"] == 3 * chunks  # stopped: nothing more counted


def _call(scorer, t: int, blocks: list[tuple[int, ...]]) -> int:
    """orm_score on t tokens of one id with the given attention blocks and one action pooling them all."""
    import ctypes

    import numpy as np

    ids, positions, segments = np.full(t, 5, dtype=np.int64), np.arange(t, dtype=np.int64), np.zeros(t, dtype=np.int64)
    block_array, pool = np.array(blocks, dtype=np.int32), np.array([[0, t]], dtype=np.int32)
    out, bad = np.zeros(1, dtype=np.float32), ctypes.c_int(-1)
    return scorer._lib.orm_score(
        scorer._handle, t, ids.ctypes.data, positions.ctypes.data, segments.ctypes.data, len(block_array),
        block_array.ctypes.data, 1, pool.ctypes.data, 1, out.ctypes.data, ctypes.byref(bad),
    )


def test_blocks_must_cover_every_token_once_in_order(trained_model):
    # the C entry point on its own: overlapping blocks overran a buffer, uncovered rows read uninitialised memory
    scorer = NativeScorer(trained_model)
    assert _call(scorer, 4, [(0, 2, 0, 2, 0, 0), (2, 4, 0, 2, 2, 4)]) == 0
    for blocks in ([(0, 4, 0, 4, 0, 0), (0, 4, 0, 4, 0, 0)],  # overlapping
                   [(0, 2, 0, 2, 0, 0)],  # rows 2 and 3 in no block
                   [(0, 2, 0, 2, 0, 0), (3, 4, 3, 4, 0, 0)],  # a gap
                   [(2, 4, 2, 4, 0, 0), (0, 2, 0, 2, 0, 0)],  # out of order
                   []):
        assert _call(scorer, 4, blocks) == 5, blocks  # ERR_BLOCK


def test_one_long_chunk_scores_in_memory_linear_in_its_length(trained_model, gemm):
    # 700 actions of the longest length in one chunk (about 20k tokens); scratch for the attention
    # scores grew with the square of the chunk (3 GB here) before. oneDNN: hundreds of row blocks
    actions = [f"{LONG_PLAN}\nvariant {i}" for i in range(700)]
    (chunk,) = trained_model.scoring_texts("q", actions).chunks(trained_model.config, 100_000)
    assert trained_model.scoring_texts("q", actions).pack(chunk).num_tokens > 15_000
    got = NativeScorer(trained_model, max_tokens=100_000, gemm=gemm).score("q", actions)
    torch.testing.assert_close(got, trained_model.score("q", actions), rtol=0, atol=1e-5)
