"""python/mla against plain torch references in float64 (reference.py), per
dtype, and its rejects: libmla's message in MlaError, outputs untouched.
Run: PYTHONPATH=python python3 -m unittest discover -s python/tests"""

import ctypes
import re
import shutil
import subprocess
import tempfile
import unittest
from pathlib import Path

import torch

import mla
import reference
from mla import _capi

REPO = Path(__file__).resolve().parents[2]
SCALE = 0.1352  # DeepSeek V3's softmax scale (docs/semantics.md §1.4)
FLOATS = (torch.float32, torch.bfloat16, torch.float16)
# error bound on out, as a fraction of the largest |reference| value: f32
# routes round once per step, bf16 and f16 hold P (and decode_forward's and
# prefill's intermediates) in their own precision. The largest errors seen
# are 5e-7, 4.5e-3 and 4e-4 (the ref, avx2, avx512 and avx512_bf16 backends).
TOLERANCE = {torch.float32: 1e-5, torch.bfloat16: 1e-2, torch.float16: 1.5e-3}


def latent_values(*shape, generator):
    """Multiples of 1/8 in [-15/8, 15/8]: exact in f32, bf16, f16 and, with the
    tests' scale 1/4, fp8_e4m3, so such a cache holds the values themselves."""
    return torch.randint(-15, 16, shape, generator=generator).float() / 8


class Case:
    """A paged cache of num_blocks shuffled blocks holding the rows of requests
    of the given lengths, written by concat_and_cache (the code under test
    writes its own cache, as a server does)."""

    def __init__(self, lengths, *, cache_dtype=torch.bfloat16, kv_cache_dtype="auto",
                 kv_lora_rank=64, rope_dim=16, block_size=16, seed=0):
        self.gen = torch.Generator().manual_seed(seed)
        self.L, self.R = kv_lora_rank, rope_dim
        self.kv_cache_dtype = kv_cache_dtype
        self.k_scale = 1.0 if kv_cache_dtype == "auto" else 0.25  # fp8 holds x / 4
        cols = max(-(-n // block_size) for n in lengths) + 1
        num_blocks = len(lengths) * cols
        # a view with a block stride wider than its rows: the cache's strides are honoured
        storage = torch.zeros(num_blocks, block_size + 3, kv_lora_rank + rope_dim,
                              dtype=torch.uint8 if kv_cache_dtype != "auto" else cache_dtype)
        self.kv_cache = storage[:, 1:block_size + 1]
        self.block_table = torch.randperm(num_blocks, generator=self.gen).int().view(-1, cols)
        self.seq_lens = torch.tensor(lengths, dtype=torch.int32)
        self.latent = [latent_values(n, kv_lora_rank + rope_dim, generator=self.gen)
                       for n in lengths]
        for r, rows in enumerate(self.latent):
            pos = torch.arange(rows.shape[0])
            slots = self.block_table[r, pos // block_size].long() * block_size + pos % block_size
            mla.concat_and_cache(rows[:, :kv_lora_rank], rows[:, kv_lora_rank:], self.kv_cache,
                                 slots, kv_cache_dtype, self.k_scale)
        self.cache64 = reference.dequantize(self.kv_cache, kv_cache_dtype, self.k_scale)

    def cache_args(self):
        return dict(kv_cache_dtype=self.kv_cache_dtype, k_scale=self.k_scale)

    def randn(self, *shape, dtype=torch.float32):
        return torch.randn(*shape, generator=self.gen).to(dtype)


class TestCase(unittest.TestCase):
    def assert_close(self, got, want, tolerance, what):
        """max |got - want| <= tolerance * max |want| (NaN fails)."""
        err = (got.double() - want).abs().max().item() if want.numel() else 0.0
        bound = tolerance * max(want.abs().max().item(), 1e-30) if want.numel() else 0.0
        self.assertTrue(err <= bound, f"{what}: error {err:.3g} > {bound:.3g}")

    def assert_rejected(self, call, message, *untouched):
        """call raises MlaError whose message (libmla's own) holds message,
        and leaves every tensor of untouched as it was."""
        before = [t.clone() for t in untouched]
        with self.assertRaises(mla.MlaError) as caught:
            call()
        self.assertIn(message, caught.exception.message)
        self.assertEqual(caught.exception.message, _capi.lib.mla_last_error().decode())
        for t, was in zip(untouched, before):
            self.assertTrue(torch.equal(t, was), "a rejected call wrote an output")


class LayoutTest(unittest.TestCase):
    def test_structs_and_enums_match_the_header(self):
        """Each struct's size and field offsets, and the enum values, as the C
        compiler lays them out from include/mla.h."""
        cc = shutil.which("cc")
        if cc is None:
            self.skipTest("no C compiler (cc)")
        lines = [f'printf("{n} %zu\\n", sizeof({n}));' for n in _capi.STRUCTS]
        lines += [f'printf("{n}.{f} %zu\\n", offsetof({n}, {f}));'
                  for n, s in _capi.STRUCTS.items() for f, _ in s._fields_]
        enums = {"MLA_OK": _capi.MLA_OK, "MLA_DTYPE_F32": _capi.DTYPE_F32,
                 "MLA_DTYPE_BF16": _capi.DTYPE_BF16, "MLA_DTYPE_F16": _capi.DTYPE_F16,
                 "MLA_DTYPE_FP8_E4M3": _capi.DTYPE_FP8_E4M3,
                 "MLA_DTYPE_FP8_E5M2": _capi.DTYPE_FP8_E5M2,
                 **{f"MLA_PREFILL_PATH_{p.upper()}": v for p, v in _capi.PREFILL_PATHS.items()}}
        lines += [f'printf("{n} %zu\\n", (size_t){n});' for n in enums]
        lines.append('printf("version %d.%d.%d\\n", MLA_VERSION_MAJOR, MLA_VERSION_MINOR, '
                     'MLA_VERSION_PATCH);')
        source = ("#include <stddef.h>\n#include <stdio.h>\n#include \"mla.h\"\n"
                  "int main(void) {\n" + "\n".join(lines) + "\nreturn 0;\n}\n")
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / "layout.c").write_text(source)
            subprocess.run([cc, "-std=c11", f"-I{REPO / 'include'}", "layout.c", "-o", "layout"],
                           cwd=tmp, check=True)
            printed = subprocess.run([str(Path(tmp) / "layout")], check=True,
                                     capture_output=True, text=True).stdout
        c = dict(line.rsplit(" ", 1) for line in printed.splitlines())
        for name, struct in _capi.STRUCTS.items():
            self.assertEqual(int(c[name]), ctypes.sizeof(struct), name)
            for field, _ in struct._fields_:
                self.assertEqual(int(c[f"{name}.{field}"]), getattr(struct, field).offset,
                                 f"{name}.{field}")
        for name, value in enums.items():
            self.assertEqual(int(c[name]), value, name)
        self.assertEqual(c["version"], _capi.HEADER_VERSION)
        self.assertEqual(mla.version(), _capi.HEADER_VERSION)

    def test_structs_take_their_field_names_only(self):
        with self.assertRaises(TypeError):
            _capi.KvCache(num_block=4)


class CacheOpsTest(TestCase):
    def test_concat_and_cache_converts_to_each_float_cache(self):
        """Rows land at their slots as torch converts them (round to nearest
        even), from strided kv_c / k_pe; padding slots (-1) and untouched rows
        stay; the cache's own strides are honoured."""
        gen = torch.Generator().manual_seed(1)
        L, R, bs, blocks = 32, 8, 4, 6
        for src in FLOATS:
            for dst in FLOATS:
                storage = torch.full((blocks, bs, L + R + 5), 9.0, dtype=dst)
                cache = storage[..., :L + R]
                wide = torch.randn(10, L + R + 3, generator=gen).to(src)
                kv_c, k_pe = wide[:, :L], wide[:, L + 3:]
                slots = torch.randperm(blocks * bs, generator=gen)[:10]
                slots[[2, 7]] = -1
                mla.concat_and_cache(kv_c, k_pe, cache, slots, threads=2)
                want = torch.full((blocks * bs, L + R), 9.0, dtype=dst)
                keep = slots >= 0
                want[slots[keep]] = torch.cat([kv_c, k_pe], 1)[keep].to(dst)
                self.assertTrue(torch.equal(cache.reshape(-1, L + R), want), f"{src} -> {dst}")
                padding = storage[..., L + R:]
                self.assertTrue(torch.equal(padding, torch.full_like(padding, 9.0)))

    def test_concat_and_cache_fp8(self):
        """An fp8 cache (uint8 tensor) stores x / scale: values on the fp8 grid
        give their own bytes; past the largest finite value they saturate."""
        gen = torch.Generator().manual_seed(2)
        for kv_cache_dtype, largest in ("fp8_e4m3", 448.0), ("fp8_e5m2", 57344.0):
            table = reference.FP8_VALUES[kv_cache_dtype]
            finite = torch.nonzero(torch.isfinite(table) & (table != 0)).flatten()
            codes = finite[torch.randint(finite.numel(), (12, 40), generator=gen)]
            scale = 0.5
            rows = (table[codes] * scale).float()
            rows[0, 0], rows[0, 1] = 1e9, -1e9
            cache = torch.zeros(4, 4, 40, dtype=torch.uint8)
            mla.concat_and_cache(rows[:, :32], rows[:, 32:], cache, torch.arange(12),
                                 kv_cache_dtype, scale)
            got = cache.view(-1, 40)[:12].long()
            self.assertTrue(torch.equal(got[:, 2:], codes[:, 2:]), kv_cache_dtype)
            self.assertEqual(table[got[0, 0]].item(), largest)
            self.assertEqual(table[got[0, 1]].item(), -largest)

    def test_gather_cache_dequantizes_into_each_dtype(self):
        """dst row t = cache row of position t - cu_seq_lens[r] + seq_starts[r]
        of r = token_to_seq[t], converted; rows past num_tokens stay."""
        for cache_dtype, kv_cache_dtype in ((torch.float32, "auto"), (torch.bfloat16, "auto"),
                                            (torch.float16, "auto"), (None, "fp8_e4m3"),
                                            (None, "fp8_e5m2")):
            case = Case([37, 5, 20], cache_dtype=cache_dtype, kv_cache_dtype=kv_cache_dtype,
                        kv_lora_rank=24, rope_dim=8, block_size=8)
            seq_starts = torch.tensor([3, 0, 16], dtype=torch.int32)
            chunk = torch.tensor([30, 5, 4], dtype=torch.int32)
            cu = torch.cat([torch.zeros(1, dtype=torch.int32), chunk.cumsum(0).int()])
            token_to_seq = torch.repeat_interleave(torch.arange(3, dtype=torch.int32), chunk.long())
            for dst_dtype in FLOATS:
                dst = torch.full((45, 32), 5.0, dtype=dst_dtype)
                mla.gather_cache(case.kv_cache, dst, case.block_table, cu, token_to_seq, 38,
                                 kv_cache_dtype, case.k_scale, seq_starts, threads=2)
                ends = (seq_starts + chunk).tolist()
                want = torch.cat([reference.cache_rows(case.cache64, case.block_table, r,
                                                       ends[r])[int(seq_starts[r]):]
                                  for r in range(3)])
                self.assertTrue(torch.equal(dst[:38], want[:38].to(dst_dtype)),
                                f"{kv_cache_dtype} {cache_dtype} -> {dst_dtype}")
                self.assertTrue(torch.equal(dst[38:], torch.full_like(dst[38:], 5.0)))

    def test_rejects_leave_cache_and_dst_untouched(self):
        case = Case([10, 3], kv_lora_rank=24, rope_dim=8, block_size=8)
        rows = torch.ones(2, 32)
        self.assert_rejected(
            lambda: mla.concat_and_cache(rows[:, :24], rows[:, 24:], case.kv_cache,
                                         torch.tensor([1, 10**6])),
            "slot_mapping[1]", case.kv_cache)
        self.assert_rejected(
            lambda: mla.concat_and_cache(rows[:, :20], rows[:, 24:], case.kv_cache,
                                         torch.tensor([1, 2])),
            "width", case.kv_cache)
        dst = torch.zeros(13, 32)
        bad_table = case.block_table.clone()
        bad_table[1, 0] = 999
        self.assert_rejected(
            lambda: mla.gather_cache(case.kv_cache, dst, bad_table,
                                     torch.tensor([0, 10, 13], dtype=torch.int32),
                                     torch.tensor([0] * 10 + [1] * 3, dtype=torch.int32)),
            "999", dst)

    def test_layouts_libmla_cannot_take_raise_before_any_call(self):
        """Strided index arrays and rows, wrong dtypes, too few rows, another
        device, an fp8 cache without its kv_cache_dtype: ValueError or
        TypeError, and the cache as it was."""
        case = Case([4], kv_lora_rank=24, rope_dim=8, block_size=8)
        rows = torch.ones(4, 32)
        cases = [
            (ValueError, lambda: mla.concat_and_cache(rows[:, :24], rows[:, 24:], case.kv_cache,
                                                      torch.arange(8)[::2])),
            (TypeError, lambda: mla.concat_and_cache(rows[:, :24], rows[:, 24:], case.kv_cache,
                                                     torch.arange(4, dtype=torch.int32))),
            (ValueError, lambda: mla.concat_and_cache(rows[:, :48:2], rows[:, 24:],
                                                      case.kv_cache, torch.arange(4))),
            (ValueError, lambda: mla.concat_and_cache(rows[:, :24], rows[:, 24:],
                                                      case.kv_cache.transpose(1, 2),
                                                      torch.arange(4))),
            (ValueError, lambda: mla.concat_and_cache(rows[:3, :24], rows[:3, 24:],
                                                      case.kv_cache, torch.arange(4))),
            (ValueError, lambda: mla.concat_and_cache(rows[:, :24].to("meta"), rows[:, 24:],
                                                      case.kv_cache, torch.arange(4))),
            (TypeError, lambda: mla.concat_and_cache(rows[:, :24], rows[:, 24:],
                                                     case.kv_cache.view(torch.uint8),
                                                     torch.arange(4))),
            (ValueError, lambda: mla.concat_and_cache(rows[:, :24], rows[:, 24:], case.kv_cache,
                                                      torch.arange(4), "fp6")),
        ]
        before = case.kv_cache.clone()
        for error, call in cases:
            with self.assertRaises(error):
                call()
        self.assertTrue(torch.equal(case.kv_cache, before))


class DecodeTest(TestCase):
    def check_decode(self, case, q_dtype, s_q, heads=4, tolerance=None, lse_tolerance=1e-5,
                     **options):
        B, L, R = case.seq_lens.numel(), case.L, case.R
        q = case.randn(B * s_q, heads, L + R + 2, dtype=q_dtype)[..., 1:L + R + 1]
        lse = torch.empty(B, heads, s_q)
        out = mla.decode(q[..., :L], q[..., L:], case.kv_cache, case.block_table, case.seq_lens,
                         SCALE, lse=lse, **case.cache_args(), **options)
        want, want_lse = reference.decode(q[..., :L], q[..., L:], case.cache64, case.block_table,
                                          case.seq_lens, SCALE)
        what = f"decode {q_dtype} q, {case.kv_cache.dtype} {case.kv_cache_dtype} cache, s_q {s_q}"
        self.assertEqual(out.dtype, q_dtype)
        self.assert_close(out, want, tolerance or TOLERANCE[q_dtype], what)
        empty = torch.isinf(want_lse)
        self.assertTrue(torch.equal(torch.isinf(lse), empty), f"{what}: empty rows' LSE")
        self.assert_close(lse[~empty], want_lse[~empty], lse_tolerance, f"{what}: LSE")

    def test_decode_each_q_and_cache_dtype(self):
        """Lengths 0 (empty rows) to several blocks; s_q 1 and 3 (causal)."""
        for q_dtype in FLOATS:
            for cache_dtype in FLOATS:
                case = Case([0, 1, 50, 17, 3], cache_dtype=cache_dtype)
                for s_q in 1, 3:
                    self.check_decode(case, q_dtype, s_q, threads=2)

    def test_decode_fp8_cache(self):
        for kv_cache_dtype in "fp8_e4m3", "fp8_e5m2":
            case = Case([40, 9], kv_cache_dtype=kv_cache_dtype)
            for q_dtype in FLOATS:
                self.check_decode(case, q_dtype, 2)

    def test_decode_bf16_compute(self):
        """f32 q with bf16 GEMMs where the backend has them (AMX): q rounded to
        bf16 moves the scores, so out and LSE get bf16's tolerance."""
        case = Case([70, 8])
        self.check_decode(case, torch.float32, 2, tolerance=TOLERANCE[torch.bfloat16],
                          lse_tolerance=TOLERANCE[torch.bfloat16], bf16_compute=True)

    def test_decode_deepseek_shape(self):
        """L 512, R 64, block size 64, as DeepSeek V3 on vLLM."""
        case = Case([130, 64], kv_lora_rank=512, rope_dim=64, block_size=64)
        self.check_decode(case, torch.bfloat16, 1, heads=16)

    def test_decode_into_given_out_and_workspace(self):
        """out with its own strides (a slice of a wider tensor), and a
        Workspace that grows once and is reused by a smaller call."""
        case = Case([33, 12])
        q = case.randn(2, 4, 80)
        wide = torch.zeros(2, 4, 70)
        out = wide[..., 3:67]
        workspace = mla.Workspace()
        got = mla.decode(q[..., :64], q[..., 64:], case.kv_cache, case.block_table,
                         case.seq_lens, SCALE, out=out, workspace=workspace)
        self.assertIs(got, out)
        want, _ = reference.decode(q[..., :64], q[..., 64:], case.cache64, case.block_table,
                                   case.seq_lens, SCALE)
        self.assert_close(out, want, TOLERANCE[torch.float32], "decode into out")
        self.assertTrue(torch.equal(wide[..., :3], torch.zeros(2, 4, 3)))
        buffer = workspace.buffer
        self.assertGreater(buffer.numel(), 0)
        mla.decode(q[:1, :, :64], q[:1, :, 64:], case.kv_cache, case.block_table,
                   case.seq_lens[:1], SCALE, workspace=workspace)
        self.assertIs(workspace.buffer, buffer)

    def test_decode_rejects(self):
        case = Case([20, 5])
        q = case.randn(2, 4, 80)
        out = torch.full((2, 4, 64), 7.0)
        bad_table = case.block_table.clone()
        bad_table[1, 0] = -3
        self.assert_rejected(
            lambda: mla.decode(q[..., :64], q[..., 64:], case.kv_cache, bad_table,
                               case.seq_lens, SCALE, out=out), "block", out)
        self.assert_rejected(
            lambda: mla.decode(q[..., :64], q[..., 64:], case.kv_cache, case.block_table,
                               case.seq_lens, float("nan"), out=out), "scale", out)
        self.assert_rejected(
            lambda: mla.decode(q[..., :60], q[..., 64:], case.kv_cache, case.block_table,
                               case.seq_lens, SCALE, out=out[..., :60]), "width", out)
        with self.assertRaises(ValueError):  # 3 tokens for 2 requests
            mla.decode(q.repeat(2, 1, 1)[:3, :, :64], q.repeat(2, 1, 1)[:3, :, 64:],
                       case.kv_cache, case.block_table, case.seq_lens, SCALE)


class ForwardTest(TestCase):
    P, V = 24, 16

    def weights(self, case, heads, dtype):
        return (case.randn(heads * (self.P + self.V), case.L) / case.L ** 0.5).to(dtype)

    def test_prepare_weights_splits_kv_b_proj(self):
        case = Case([1])
        kv_b_proj = self.weights(case, 3, torch.float32)
        w_uk_t, w_uv = mla.prepare_weights(kv_b_proj, self.P, self.V)
        want_uk_t, want_uv = reference.split_weights(kv_b_proj, self.P, self.V)
        self.assertTrue(torch.equal(w_uk_t.double(), want_uk_t))
        self.assertTrue(torch.equal(w_uv.double(), want_uv))
        w_uk_t, w_uv = mla.prepare_weights(kv_b_proj.bfloat16(), self.P, self.V)
        self.assertEqual(w_uv.dtype, torch.bfloat16)
        with self.assertRaises(ValueError):
            mla.prepare_weights(kv_b_proj.t().contiguous().t(), self.P, self.V)

    def test_decode_forward_each_dtype(self):
        heads = 4
        for dtype in FLOATS:
            case = Case([0, 45, 16], cache_dtype=torch.bfloat16)
            kv_b_proj = self.weights(case, heads, dtype)
            w_uk_t, w_uv = mla.prepare_weights(kv_b_proj, self.P, self.V)
            want_uk_t, want_uv = reference.split_weights(kv_b_proj, self.P, self.V)
            for s_q in 1, 2:
                q = case.randn(3 * s_q, heads, self.P + case.R, dtype=dtype)
                lse = torch.empty(3, heads, s_q)
                out = mla.decode_forward(q, w_uk_t, w_uv, case.kv_cache, case.block_table,
                                         case.seq_lens, SCALE, lse=lse)
                want, want_lse = reference.decode_forward(q, want_uk_t, want_uv, case.cache64,
                                                          case.block_table, case.seq_lens, SCALE)
                self.assertEqual(out.shape, (3 * s_q, heads * self.V))
                self.assert_close(out, want, 2 * TOLERANCE[dtype], f"decode_forward {dtype}")
                finite = torch.isfinite(want_lse)
                self.assertTrue(torch.equal(torch.isfinite(lse), finite))
                self.assert_close(lse[finite], want_lse[finite], TOLERANCE[dtype],
                                  f"decode_forward {dtype} LSE")

    def test_decode_forward_rejects(self):
        case = Case([20, 5])
        w_uk_t, w_uv = mla.prepare_weights(self.weights(case, 4, torch.float32), self.P, self.V)
        q = case.randn(2, 4, self.P + case.R)
        out = torch.full((2, 4 * self.V), 7.0)
        self.assert_rejected(
            lambda: mla.decode_forward(q, w_uk_t, w_uv, case.kv_cache, case.block_table,
                                       torch.tensor([20, 10**6], dtype=torch.int32), SCALE,
                                       out=out), "seq_lens", out)
        with self.assertRaises(ValueError):  # w_uv of other heads
            mla.decode_forward(q, w_uk_t, w_uv[:2], case.kv_cache, case.block_table,
                               case.seq_lens, SCALE)


class PrefillTest(TestCase):
    P, V, HEADS = 24, 16, 4

    def make(self, dtype, kv_cache_dtype="auto", contexts=(40, 17, 0), news=(5, 9, 6)):
        """Requests with context first, their context and new tokens in the cache."""
        case = Case([c + n for c, n in zip(contexts, news)], kv_cache_dtype=kv_cache_dtype)
        qsl = torch.tensor([0, *torch.tensor(news).cumsum(0).tolist()], dtype=torch.int32)
        new_rows = torch.cat([rows[c:] for rows, c in zip(case.latent, contexts)]).to(dtype)
        q = case.randn(int(qsl[-1]), self.HEADS, self.P + case.R + 4, dtype=dtype)[..., :-4]
        kv_b_proj = (case.randn(self.HEADS * (self.P + self.V), case.L) / case.L ** 0.5).to(dtype)
        return case, q, new_rows, qsl, torch.tensor(contexts, dtype=torch.int32), kv_b_proj

    def check(self, dtype, path, kv_cache_dtype="auto", chunk_tokens=None):
        case, q, new_rows, qsl, contexts, kv_b_proj = self.make(dtype, kv_cache_dtype)
        w_uk_t, w_uv = mla.prepare_weights(kv_b_proj, self.P, self.V)
        weights = {"mha": dict(kv_b_proj=kv_b_proj), "absorbed": dict(w_uk_t=w_uk_t, w_uv=w_uv),
                   "auto": dict(kv_b_proj=kv_b_proj, w_uk_t=w_uk_t, w_uv=w_uv)}[path]
        out = mla.prefill(q, new_rows[:, :case.L], new_rows[:, case.L:], case.kv_cache,
                          case.block_table, qsl, contexts, SCALE, path=path,
                          context_chunk_tokens=chunk_tokens, threads=2, **weights,
                          **case.cache_args())
        want = reference.prefill(q, *reference.split_weights(kv_b_proj, self.P, self.V),
                                 case.cache64, case.block_table, qsl, contexts, SCALE)
        self.assertEqual(out.dtype, dtype)
        self.assert_close(out, want, TOLERANCE[dtype], f"prefill {path} {dtype}, "
                          f"{kv_cache_dtype} cache, chunks of {chunk_tokens}")

    def test_prefill_each_path_and_dtype(self):
        for dtype in FLOATS:
            for path in "mha", "absorbed", "auto":
                self.check(dtype, path)

    def test_prefill_context_in_several_chunks(self):
        """32 workspace rows for two requests with context: chunks of 16 tokens."""
        self.check(torch.float32, "mha", chunk_tokens=32)
        self.check(torch.bfloat16, "mha", chunk_tokens=32)

    def test_prefill_fp8_cache(self):
        for path in "mha", "absorbed":
            self.check(torch.bfloat16, path, kv_cache_dtype="fp8_e4m3")

    def test_prefill_rejects(self):
        case, q, new_rows, qsl, contexts, kv_b_proj = self.make(torch.float32)
        out = torch.full((q.shape[0], self.HEADS * self.V), 7.0)
        bad_table = case.block_table.clone()
        bad_table[0, 1] = 10**5
        args = (q, new_rows[:, :case.L], new_rows[:, case.L:], case.kv_cache)
        self.assert_rejected(
            lambda: mla.prefill(*args, bad_table, qsl, contexts, SCALE, kv_b_proj=kv_b_proj,
                                path="mha", out=out), "100000", out)
        self.assert_rejected(  # the absorbed path without its weights
            lambda: mla.prefill(*args, case.block_table, qsl, contexts, SCALE,
                                kv_b_proj=kv_b_proj, path="absorbed", out=out), "w_uk_t", out)
        with self.assertRaises(ValueError):
            mla.prefill(*args, case.block_table, qsl, contexts, SCALE, path="mha")


class ReadmeTest(unittest.TestCase):
    def test_readme_examples_run(self):
        """python/README.md's examples, in order, as one program."""
        text = (REPO / "python" / "README.md").read_text()
        blocks = re.findall(r"```python\n(.*?)```", text, re.S)
        self.assertEqual(len(blocks), 2)
        scope = {}
        exec(blocks[0], scope)
        self.assertEqual(scope["out"].shape, (2, 16 * 128))
        exec(blocks[1], scope)
        self.assertEqual(scope["out"].shape, (5, 16 * 128))
        self.assertTrue(torch.isfinite(scope["out"]).all())


if __name__ == "__main__":
    unittest.main()
