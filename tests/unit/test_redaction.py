"""Redaction by value: the shapes of real credentials go wherever they sit in a string; what jitguard needs
to show (digests, paths, C++ and kernel names, flags) stays readable."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from jitguard.redaction import REDACTED, RedactingWriter, redact_bytes, redact_text, redact_tree, redact_value

SECRETS = {
    "github classic": "ghp_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8",
    "github fine-grained": "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyzABCDEF",
    "hugging face": "hf_QwErTyUiOpAsDfGhJkLzXcVbNm12345678",
    "openai": "sk-proj-Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0Fe",
    "aws access key id": "AKIAABCDEFGHIJ234567",
    "aws secret key": "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",
    "random api key": "aB3dE5fG7hI9jK1lM3nO5pQ7rS9tU1vW",
}


@pytest.mark.parametrize("kind", sorted(SECRETS))
def test_a_credential_shape_is_redacted_wherever_it_sits(kind: str) -> None:
    secret = SECRETS[kind]
    for text in (secret, f"/mnt/{secret}/lib", f"-L{secret} -lcuda", f"error: cannot open {secret}: denied"):
        redacted = redact_text(text)
        assert secret not in redacted and REDACTED in redacted, (kind, text, redacted)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("token=hunter2-longer", f"token={REDACTED}"),
        ("-DAPI_KEY=abc123", f"-DAPI_KEY={REDACTED}"),
        ("password = 's3 cr3t'", f"password = {REDACTED}"),
        ("https://user:pw12345@host/x", f"https://{REDACTED}@host/x"),
        ("s3://AKIAIOSFODNN7EXAMPL:wJal/rXU@tn/EMI@bucket/p", f"s3://{REDACTED}@bucket/p"),
        (
            "https://b.s3.amazonaws.com/k?X-Amz-Signature=0a1b2c&x=1",
            f"https://b.s3.amazonaws.com/k?X-Amz-Signature={REDACTED}&x=1",
        ),
        ("git+https://github.com/org/repo@v1.2 stays", "git+https://github.com/org/repo@v1.2 stays"),
        ("Authorization: Bearer abcdefghijklmnop1234", f"Authorization: Bearer {REDACTED}"),
    ],
)
def test_secret_pairs_keep_their_name_and_lose_their_value(text: str, expected: str) -> None:
    assert redact_text(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "fingerprint " + "0123456789abcdef" * 4,  # jitguard's own digests
        "/usr/local/cuda-13.0/targets/x86_64-linux/lib/stubs/libcuda.so",
        "GPU-4f3a2b1c-0d9e-8f7a-6b5c-4d3e2f1a0b9c",
        "undefined reference to `_ZN10flashinfer3gdn14GdnPrefillKernelILi128ELi64EEEvPKT_'",
        "GdnPrefillSm90KernelChunk64HeadDim128Bf16Fp32State",
        "batch_prefill_with_kv_cache_dtype_q_bf16_dtype_kv_bf16_head_dim_qk_128_use_logits_cap_False",
        "version `GLIBCXX_3.4.32' not found (required by gdn_prefill_sm90.so)",
        "[12/34] nvcc -gencode=arch=compute_90a,code=sm_90a -O3 -c gdn_prefill.cu -o gdn_prefill.cuda.o",
    ],
)
def test_what_jitguard_must_show_is_left_alone(text: str) -> None:
    assert redact_text(text) == text


def test_a_variable_named_like_a_secret_is_redacted_whole_and_others_by_value() -> None:
    assert redact_value("HF_TOKEN", "short") == REDACTED
    assert redact_value("CUDA_HOME", "/opt/cuda") == "/opt/cuda"
    assert redact_value("CUDA_HOME", f"/opt/{SECRETS['hugging face']}") == f"/opt/{REDACTED}"


def test_a_tree_is_redacted_by_key_and_by_value_at_any_depth() -> None:
    tree = {"env": [{"API_KEY": "x", "PATH": f"/bin:/{SECRETS['github classic']}"}], "log": Path("/p")}
    assert redact_tree(tree) == {"env": [{"API_KEY": REDACTED, "PATH": f"/bin:/{REDACTED}"}], "log": "/p"}
    assert redact_tree({"key": "0123abc"}, names=False) == {"key": "0123abc"}  # a record's own field


def test_bytes_that_are_not_utf8_survive_redaction() -> None:
    raw = b"\xff\xfe caf\xe9 " + SECRETS["openai"].encode() + b"\n"
    assert redact_bytes(raw) == b"\xff\xfe caf\xe9 " + REDACTED.encode() + b"\n"


def test_a_redacting_writer_redacts_what_passes_and_is_the_stream_otherwise() -> None:
    stream = io.StringIO()
    writer = RedactingWriter(stream)
    writer.write(f"evidence: {SECRETS['aws access key id']}\n")
    assert stream.getvalue() == f"evidence: {REDACTED}\n"
    assert writer.isatty() is False
