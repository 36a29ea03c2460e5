"""Generation's domain logic: stop sequences and what a stream may hand on, the
reader of a token stream, the OpenAI API's translation, and continuous batching
against ``transformers``' own greedy generate on a small GPT-2 made here."""

from __future__ import annotations

import json
import time

import pytest

from harness.fakes import CharTokenizer, FakeResults, FakeTokenStream, ScriptDecoder
from switchyard.generation import (
    CHAT_STOP,
    Chunk,
    GenerationRequest,
    check_generation,
    over_context,
    render_chat,
    tokens_written,
)
from switchyard.schemas import ErrorInfo, GenerationSignature, ResultRecord
from switchyard_router.logic import RequestRejected
from switchyard_router.openai_api import chat_request, completion_request
from switchyard_router.streaming import Ending, Piece, TokenReader
from switchyard_worker.generation import Continuous, Sequence, advance, held_back
from tests.devices import DEVICES

SIG = GenerationSignature(context_length=64, max_tokens=32, max_chars=100)


def sequence(prompt="ab", key="r1", **asked) -> Sequence:
    request = GenerationRequest(prompt=prompt, **{"max_tokens": 20, **asked})
    return Sequence(key=key, request=request, prompt_ids=CharTokenizer().encode(prompt), seed=1)


def feed(seq: Sequence, text: str) -> list[str]:
    tokenizer = CharTokenizer()
    pieces = []
    for c in text:
        if seq.done:
            break
        pieces.append(advance(seq, ord(c), tokenizer, 64))
    return pieces


# -- stop sequences and held-back text ------------------------------------------------


def test_text_that_may_begin_a_stop_sequence_waits_for_the_next_token():
    assert held_back("hello wo", ["world"]) == 2
    assert held_back("hello", ["world"]) == 0
    assert held_back("abc\ufffd", []) == 1  # part of a character


def test_a_stop_sequence_split_over_tokens_is_never_handed_on():
    seq = sequence(stop=["END"])
    pieces = feed(seq, "one EN two EXEND more")
    assert seq.finish_reason == "stop"
    assert seq.emitted == "one EN two EX"
    assert "".join(pieces) == seq.emitted
    assert len(seq.ids) == len("one EN two EXEND")  # it stopped at the stop's last token


def test_max_tokens_ends_a_sequence_as_length_and_hands_on_what_was_held():
    seq = sequence(stop=["xyz"], max_tokens=4)
    feed(seq, "abxyq")
    assert seq.finish_reason == "length" and seq.emitted == "abxy"


def test_the_end_of_text_token_ends_a_sequence_as_stop():
    seq = sequence()
    feed(seq, "ab\x00cd")
    assert seq.finish_reason == "stop" and seq.emitted == "ab"
    assert seq.output()["usage"] == {"prompt_tokens": 2, "completion_tokens": 3, "total_tokens": 5}


# -- requests ------------------------------------------------------------------------


def test_generation_inputs_are_checked_with_the_field_at_fault():
    assert check_generation("a prompt", SIG, "inputs[0]") == []
    fields = {e.field for e in check_generation({"prompt": "x", "top_k": 1}, SIG, "inputs[0]")}
    assert fields == {"inputs[0].top_k"}
    too_many = check_generation({"prompt": "x", "max_tokens": 33}, SIG, "inputs[0]")
    assert [e.field for e in too_many] == ["inputs[0].max_tokens"]
    assert check_generation({"prompt": "   "}, SIG, "f")[0].field == "f.prompt"
    assert check_generation([1, 2], SIG, "f")[0].field == "f"
    # an item of a list is named by its index, as the caller wrote it
    stops = check_generation({"prompt": "x", "stop": ["a", 1]}, SIG, "inputs[0]")
    assert [e.field for e in stops] == ["inputs[0].stop[1]"]
    assert over_context(60, 4, SIG.context_length) is None
    assert "over the model's context" in over_context(61, 4, SIG.context_length)


def test_a_request_without_a_seed_samples_from_its_own_id_and_is_not_repeatable():
    free = GenerationRequest(prompt="x")
    assert free.seed_for("a") == free.seed_for("a") != free.seed_for("b")
    assert not free.repeatable
    assert GenerationRequest(prompt="x", temperature=0).repeatable
    assert GenerationRequest(prompt="x", seed=3).seed_for("a") == 3


def test_the_openai_api_is_translated_to_generation_requests():
    chat = chat_request(
        {
            "model": "m",
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": [{"type": "text", "text": "Hi"}]},
            ],
            "max_completion_tokens": 7,
            "stop": "!",
            "seed": 4,
            "stream": True,
            "user": "someone",
        }
    )
    assert chat == {
        "prompt": render_chat([{"role": "system", "content": "Be brief."},
                               {"role": "user", "content": "Hi"}]),
        "stop": ["!", CHAT_STOP],
        "stream": True,
        "seed": 4,
        "max_tokens": 7,
    }  # fmt: skip
    assert chat["prompt"] == "System: Be brief.\nUser: Hi\nAssistant:"
    assert completion_request({"model": "m", "prompt": ["only one"]})["prompt"] == "only one"
    # what OpenAI takes and this platform does not do, at its neutral value and JSON type
    neutral = {"n": 1, "logprobs": False, "presence_penalty": 0.0, "frequency_penalty": 0,
               "echo": None, "tool_choice": "none"}  # fmt: skip
    assert completion_request({"model": "m", "prompt": "x", **neutral})["prompt"] == "x"
    for bad, param in (
        ({"model": "m", "prompt": "x", "n": 2}, "n"),
        ({"model": "m", "prompt": "x", "logprobs": 3}, "logprobs"),
        ({"model": "m", "prompt": "x", "top_k": 3}, "top_k"),
        ({"model": "m", "prompt": ["a", "b"]}, "prompt"),
        ({"model": "m", "prompt": "x", "stop": ["a"] * 5}, "stop"),
        # an integer no float holds: math.isfinite raised OverflowError (a 500)
        ({"model": "m", "prompt": "x", "seed": -(10**400)}, "seed"),
        # a neutral value of another JSON type: true is no n of 1, 0 no logprobs of false
        ({"model": "m", "prompt": "x", "n": True}, "n"),
        ({"model": "m", "prompt": "x", "logprobs": 0}, "logprobs"),
        ({"model": "m", "prompt": "x", "stop": ["a", 5]}, "stop[1]"),
    ):
        with pytest.raises(RequestRejected) as refused:
            completion_request(bad)
        assert refused.value.status == 400 and refused.value.errors[0].field == param
    # passed on to the signature's check, which refuses it (400), as any over its limit
    huge = {"model": "m", "prompt": "x", "max_tokens": 10**400}
    assert completion_request(huge)["max_tokens"] == 10**400
    with pytest.raises(RequestRejected) as refused:  # named as the caller sent it
        chat_request({"model": "m", "messages": [{"role": "user", "content": "x"}],
                      "max_completion_tokens": 0})  # fmt: skip
    assert refused.value.errors[0].field == "max_completion_tokens"
    for messages, param in (
        ([{"role": "tool", "content": "x"}], "messages[0].role"),
        (["hi"], "messages[0]"),
        # what would be ignored is refused: a name, tool calls, a part's extra field
        ([{"role": "user", "content": "x"}, {"role": "user", "content": "y", "foo": 1}],
         "messages[1].foo"),
        ([{"role": "assistant", "content": "x", "tool_calls": []}], "messages[0].tool_calls"),
        ([{"role": "user", "content": [{"type": "text", "text": "x", "extra": 1}]}],
         "messages[0].content[0].extra"),
    ):  # fmt: skip
        with pytest.raises(RequestRejected) as refused:
            chat_request({"model": "m", "messages": messages})
        assert refused.value.status == 400 and refused.value.errors[0].field == param


# -- reading a stream ------------------------------------------------------------------


def record(status="done", text="", **extra) -> ResultRecord:
    return ResultRecord(
        request_id="r1", tenant="acme", model="m", version="v1", status=status,
        outputs=[{"text": text, "finish_reason": "length", "usage": {"completion_tokens": 3}}]
        if status == "done" else None,
        created_at=0, expires_at=1, **extra,
    )  # fmt: skip


def reader(stream, results=None) -> TokenReader:
    return TokenReader(stream, results or FakeResults(), "acme", "r1", sleep=lambda s: None)


def flat(groups) -> list:
    """What a reader's groups hold, one after the other."""
    return [item for group in groups for item in group]


def test_the_reader_hands_on_every_token_once_in_order_across_overlapping_chunks():
    stream = FakeTokenStream()
    stream.put("acme", "r1", Chunk(0, [1, 2], ["a", "b"]), 0)
    # a second writer's chunk, overlapping the first's last token
    stream.put("acme", "r1", Chunk(1, [2, 3, 4], ["b", "", "cd"]), 0)
    stream.put("acme", "r1", Chunk(4, [5], ["e"], "length", {"completion_tokens": 5}), 0)
    stream.put("acme", "other", Chunk(0, [9], ["z"]), 0)
    got = flat(reader(stream).rest(deadline=float("inf")))
    assert [p.text for p in got if isinstance(p, Piece)] == ["a", "b", "cd", "e"]
    assert got[-1] == Ending("length", {"completion_tokens": 5})


def test_a_gap_waits_for_its_chunk():
    stream = FakeTokenStream()
    stream.put("acme", "r1", Chunk(2, [3], ["c"]), 0)
    r = reader(stream)
    assert r.first(deadline=0) is None  # token 0 is not there yet
    stream.put("acme", "r1", Chunk(0, [1, 2], ["a", "b"]), 0)
    assert [p.text for p in r.first(deadline=0)] == ["a", "b", "c"]


def test_a_result_without_its_last_chunk_ends_the_stream_with_the_rest_of_its_text():
    stream, results = FakeTokenStream(), FakeResults()
    stream.put("acme", "r1", Chunk(0, [1], ["ab"]), 0)
    results.items[("acme", "r1")] = record(text="abcd")
    r = reader(stream, results)
    got = flat(r.rest(deadline=float("inf")))
    assert [p.text for p in got if isinstance(p, Piece)] == ["ab", "cd"]
    assert isinstance(got[-1], Ending) and got[-1].finish_reason == "length"


def test_a_request_that_failed_ends_its_stream_with_its_record():
    results = FakeResults()
    failed = record("error", error=ErrorInfo(code="retries_exhausted", message="boom"))
    results.items[("acme", "r1")] = failed
    got = reader(FakeTokenStream(), results).first(deadline=float("inf"))
    assert got is not None and got[0].failed and got[0].record == failed


def test_a_worker_taking_over_reads_only_the_contiguous_chunks():
    stream = FakeTokenStream()
    stream.put("acme", "r1", Chunk(0, [1], ["a"]), 0)
    stream.put("acme", "r1", Chunk(1, [2], ["b"]), 0)
    stream.put("acme", "r1", Chunk(3, [4], ["d"]), 0)  # after a gap: not taken
    assert [c.start for c in tokens_written(stream, "acme", "r1")] == [0, 1]


# -- continuous batching ----------------------------------------------------------------


def test_sequences_join_and_leave_the_running_batch_between_steps():
    decoder = ScriptDecoder("abcdefgh")
    running = Continuous(decoder, max_sequences=4)
    short, long = sequence(key="short", max_tokens=2), sequence(key="long", max_tokens=5)
    running.join(long)
    running.step()
    running.join(short)  # joins the running batch, does not wait for it
    ended = [s.key for _ in range(4) for s in running.step()]
    assert ended == ["short", "long"]
    assert decoder.steps == [["long"], ["long", "short"], ["long", "short"], ["long"], ["long"]]
    assert long.emitted == "abcde" and short.emitted == "ab"


def test_a_sequence_whose_request_ended_elsewhere_leaves_before_its_end():
    decoder = ScriptDecoder("abcdefgh")
    running = Continuous(decoder, max_sequences=4)
    kept, cancelled = sequence(key="kept", max_tokens=3), sequence(key="cancelled", max_tokens=8)
    running.join(kept)
    running.join(cancelled)
    running.step()
    running.leave([cancelled])  # its request was cancelled while it ran
    ended = [s.key for _ in range(3) for s in running.step()]
    assert ended == ["kept"] and running.running == []
    assert decoder.steps == [["kept", "cancelled"], ["kept"], ["kept"]]
    assert cancelled.emitted == "a" and not cancelled.done


def test_a_failed_step_leaves_the_batch_empty_and_the_decoder_reset():
    decoder = ScriptDecoder("ab", fail_at_step=2)
    running = Continuous(decoder, max_sequences=2)
    running.join(sequence(key="a"))
    running.step()
    with pytest.raises(RuntimeError):
        running.step()
    assert [s.key for s in running.abandon()] == ["a"] and running.running == []
    assert decoder.resets >= 1


@pytest.fixture(scope="module")
def small_gpt(tmp_path_factory):
    """A GPT-2 of random weights (no training: greedy decoding is still a fixed
    function of the weights) with a byte-level tokenizer, saved as a model dir."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    texts = ["Return the value of the object.", "Open the file and read it."] * 20
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.train_from_iterator(
        texts,
        trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>"],
                            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                            show_progress=False),
    )  # fmt: skip
    torch.manual_seed(0)
    eos = tokenizer.token_to_id("<|endoftext|>")
    model = GPT2LMHeadModel(GPT2Config(vocab_size=300, n_positions=128, n_embd=32, n_layer=2,
                                       n_head=2, bos_token_id=eos, eos_token_id=eos))  # fmt: skip
    directory = tmp_path_factory.mktemp("small-gpt")
    model.save_pretrained(directory)
    PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token="<|endoftext|>").save_pretrained(
        directory
    )
    return directory


@pytest.mark.parametrize("device", DEVICES)
def test_continuous_batching_gives_each_sequence_what_it_would_get_alone(small_gpt, device):
    import torch

    from switchyard_worker.generation import TransformersDecoder

    decoder = TransformersDecoder(small_gpt, device)
    tokenizer = decoder.tokenizer
    prompts = {"a": "Return the", "b": "Open the file and", "c": "x", "d": "Return the value"}
    alone = {}
    for key, prompt in prompts.items():
        ids = tokenizer.encode(prompt)
        out = decoder.model.generate(
            torch.tensor([ids], device=device),
            attention_mask=torch.ones(1, len(ids), dtype=torch.long, device=device),
            max_new_tokens=12, do_sample=False, pad_token_id=tokenizer.eos_id,
        )  # fmt: skip
        alone[key] = out[0][len(ids) :].tolist()

    def make(key, max_tokens=12):
        request = GenerationRequest(prompt=prompts[key], max_tokens=max_tokens, temperature=0)
        return Sequence(key=key, request=request, prompt_ids=tokenizer.encode(prompts[key]),
                        seed=0)  # fmt: skip

    running = Continuous(decoder, max_sequences=4)
    seqs = {"a": make("a"), "b": make("b", 4)}
    running.join(seqs["a"])
    running.join(seqs["b"])
    for _ in range(3):
        running.step()
    seqs["c"] = make("c")  # joins mid-way, while "b" is about to leave
    running.join(seqs["c"])
    for _ in range(5):
        running.step()
    seqs["d"] = make("d")
    running.join(seqs["d"])
    while running.running:
        running.step()
    for key, seq in seqs.items():
        want = alone[key][: seq.request.max_tokens]
        assert seq.ids[: len(want)] == want[: len(seq.ids)], key
    assert seqs["b"].finish_reason == "length" and len(seqs["b"].ids) == 4


@pytest.mark.parametrize("device", DEVICES)
def test_a_sampled_sequence_resumed_from_its_streamed_tokens_continues_the_same(small_gpt, device):
    from switchyard_worker.generation import TransformersDecoder

    decoder = TransformersDecoder(small_gpt, device)
    tokenizer = decoder.tokenizer

    def make():
        request = GenerationRequest(prompt="Return the", max_tokens=16, temperature=1.0, seed=42)
        return Sequence(key="r", request=request, prompt_ids=tokenizer.encode("Return the"),
                        seed=42)  # fmt: skip

    whole = make()
    running = Continuous(decoder, max_sequences=2)
    running.join(whole)
    while running.running:
        running.step()
    resumed = make()
    resumed.ids = whole.ids[:6]  # the tokens streamed before its worker died
    resumed.emitted = "".join(whole.pieces[:6])
    decoder.reset()
    running.join(resumed)
    while running.running:
        running.step()
    assert resumed.ids == whole.ids and resumed.emitted == whole.emitted
    assert json.dumps(resumed.output()) == json.dumps(whole.output())


def test_a_top_p_too_small_for_any_token_still_keeps_the_likeliest():
    import torch

    from switchyard_worker.generation import sample

    logits = torch.tensor([0.0, 3.0, 1.0])
    tiny = sequence(temperature=1.0, top_p=5e-324)
    assert {sample(logits, tiny, i) for i in range(20)} == {1}


@pytest.mark.parametrize("temperature", [2e-212, 1e-40, 1e-38])
def test_a_temperature_too_small_for_float32_draws_the_likeliest(temperature):
    import torch

    from switchyard_worker.generation import sample

    logits = torch.tensor([40.0, 93.0, 1.0, -7.0])
    cold = sequence(temperature=temperature, top_p=0.9)
    assert {sample(logits, cold, i) for i in range(20)} == {1}


def test_a_hub_reads_every_stream_in_one_call_per_look_and_each_gets_its_own_tokens():
    import threading

    from switchyard_router.streaming import StreamHub

    stream = FakeTokenStream()
    hub = StreamHub(stream, interval_s=0.005)
    readers = {
        rid: TokenReader(stream, FakeResults(), "acme", rid, hub=hub) for rid in ("r1", "r2", "r3")
    }
    texts: dict[str, list] = {}

    def follow(rid: str) -> None:
        texts[rid] = flat(readers[rid].rest(deadline=time.monotonic() + 10))

    threads = [threading.Thread(target=follow, args=(rid,)) for rid in readers]
    for t in threads:
        t.start()
    for i in range(5):  # each stream's chunks, written as a worker writes them
        for rid in readers:
            last = i == 4
            chunk = Chunk(i * 2, [1, 2], [f"{rid}.{i}a", f"{rid}.{i}b"])
            if last:
                chunk.finish_reason, chunk.usage = "length", {"completion_tokens": 10}
            stream.put("acme", rid, chunk, 0)
        time.sleep(0.02)
    for t in threads:
        t.join(10)
    for rid, got in texts.items():
        assert [p.text for p in got if isinstance(p, Piece)] == [
            f"{rid}.{i}{half}" for i in range(5) for half in "ab"
        ]
        assert got[-1] == Ending("length", {"completion_tokens": 10})
    looks = [n for kind, n in stream.log if kind == "at"]
    assert looks and max(looks) == 3  # the three streams in one read
    assert not [kind for kind, _ in stream.log if kind == "after"]  # no Query per stream


def test_a_hub_reader_falls_back_to_a_query_for_a_chunk_that_does_not_begin_where_it_looks():
    from switchyard_router.streaming import StreamHub

    stream = FakeTokenStream()
    stream.put("acme", "r1", Chunk(0, [1, 2], ["a", "b"]), 0)
    # another worker's chunk overlapping the first: it begins at token 1, not 2
    stream.put("acme", "r1", Chunk(1, [2, 3], ["b", "c"], "length", {"n": 3}), 0)
    reader = TokenReader(stream, FakeResults(), "acme", "r1", hub=StreamHub(stream, 0.005))
    got = flat(reader.rest(deadline=time.monotonic() + 5))
    assert [p.text for p in got if isinstance(p, Piece)] == ["a", "b", "c"]
    assert got[-1] == Ending("length", {"n": 3})
