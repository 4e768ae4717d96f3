import torch
from transformers import AutoModelForCausalLM, AutoTokenizer


def test_tokenizer_round_trips_english_and_chinese(tiny_tokenizer):
    text = "你是孙悟空。Why is the rum always gone? 俺老孙来也！"
    ids = tiny_tokenizer(text)["input_ids"]
    assert tiny_tokenizer.decode(ids) == text
    assert tiny_tokenizer.unk_token_id not in ids
    assert tiny_tokenizer.chat_template is None  # a base model's tokenizer


def test_control_tokens_are_special(tiny_tokenizer):
    ids = tiny_tokenizer("<|im_start|>system", add_special_tokens=False)["input_ids"]
    assert ids[0] == tiny_tokenizer.convert_tokens_to_ids("<|im_start|>")
    assert tiny_tokenizer.pad_token_id != tiny_tokenizer.eos_token_id


def test_tiny_llama_loads_from_folder(tiny_model_path):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path)
    assert model.config.num_hidden_layers == 2
    assert model.config.vocab_size == len(tokenizer)
    batch = tokenizer(["俺老孙来也", "Arr, matey"], return_tensors="pt", padding=True)
    logits = model(**batch).logits
    assert logits.shape[:2] == batch["input_ids"].shape
    assert torch.isfinite(logits).all()


def test_shared_data_fixture_points_at_release(rolebench_dir):
    assert (rolebench_dir / "rolebench-zh" / "general" / "train.jsonl").is_file()
