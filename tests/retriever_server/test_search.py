"""Search backends: exact torch search equals faiss Flat; padding when k exceeds the index; backend choice."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from retriever_server.search import (
    BLAS_THRESHOLD,
    FaissBackend,
    TorchBackend,
    faiss_has_gpu,
    import_faiss,
    resolve_backend,
)


@pytest.fixture(scope="module")
def vectors():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((500, 24)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_blas_threshold_is_lowered():
    faiss = import_faiss()
    assert faiss.cvar.distance_compute_blas_threshold == BLAS_THRESHOLD


@pytest.mark.parametrize("block_rows", [1 << 20, 64])  # one block, and a running top-k over 8 blocks
@pytest.mark.parametrize("n_queries", [1, 40])  # below and above BLAS_THRESHOLD: faiss's two distance paths
def test_torch_backend_equals_faiss_flat(vectors, block_rows, n_queries):
    faiss = import_faiss()
    index = faiss.IndexFlatIP(24)
    index.add(vectors)
    queries = vectors[:n_queries] + 0.1
    f_scores, f_rows = FaissBackend(index).search(queries, 7)
    t_scores, t_rows = TorchBackend(vectors, ["cpu"], block_rows=block_rows).search(queries, 7)
    np.testing.assert_array_equal(t_rows, f_rows)
    np.testing.assert_allclose(t_scores, f_scores, atol=1e-5)


def test_faiss_search_keeps_its_threads_after_a_one_thread_encode(vectors):
    """OpenMP's thread count belongs to the calling thread and torch shares it with faiss: the encoder's one-thread
    encode of a single query must not leave the search that follows on one thread."""
    torch = pytest.importorskip("torch")
    faiss = import_faiss()
    index = faiss.IndexFlatIP(24)
    index.add(vectors)
    backend = FaissBackend(index, threads=2)
    before = torch.get_num_threads()

    def worker() -> int:  # the server's worker thread
        torch.set_num_threads(1)  # what Encoder.encode does for one text; with one OpenMP runtime, faiss's drops too
        faiss.omp_set_num_threads(1)  # (explicit, for an install where the two runtimes are separate)
        backend.search(vectors[:1], 3)
        return faiss.omp_get_max_threads()

    try:
        with ThreadPoolExecutor(1) as pool:
            assert pool.submit(worker).result() == 2
    finally:
        torch.set_num_threads(before)


def test_two_cpu_shards_merge_like_one(vectors):
    one = TorchBackend(vectors, ["cpu"]).search(vectors[:5], 4)
    two = TorchBackend(vectors, ["cpu", "cpu"]).search(vectors[:5], 4)
    np.testing.assert_array_equal(one[1], two[1])


def test_k_larger_than_index_pads_with_minus_one(vectors):
    small = vectors[:3]
    faiss = import_faiss()
    index = faiss.IndexFlatIP(24)
    index.add(small)
    for backend in (FaissBackend(index), TorchBackend(small, ["cpu"])):
        scores, rows = backend.search(small[:1], 5)
        assert rows.shape == (1, 5) and list(rows[0, 3:]) == [-1, -1], backend.name
        assert rows[0, 0] == 0


def test_torch_backend_reads_index_dir_and_flat_file(index_dir):
    from_dir = TorchBackend.from_files(index_dir)
    from_file = TorchBackend.from_files(index_dir / "index.faiss")
    assert from_dir.ntotal == from_file.ntotal == 68
    q = np.load(index_dir / "embeddings.npy")[:3]
    np.testing.assert_array_equal(from_dir.search(q, 3)[1], from_file.search(q, 3)[1])
    assert list(from_dir.search(q, 1)[1][:, 0]) == [0, 1, 2]  # each passage is its own nearest neighbour


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


@pytest.mark.skipif(_cuda(), reason="'auto' picks a GPU backend on CUDA machines")
def test_resolve_backend_on_cpu():
    assert resolve_backend("auto") == "faiss"


def test_resolve_backend_errors():
    assert resolve_backend("torch") == "torch"
    with pytest.raises(ValueError, match="needs a Flat index"):
        resolve_backend("torch", index_type="HNSW32")
    with pytest.raises(ValueError, match="choose one of"):
        resolve_backend("annoy")


@pytest.mark.skipif(faiss_has_gpu(), reason="faiss has GPU support here")
def test_faiss_gpu_without_gpu_build_says_what_to_do(tmp_path):
    faiss = import_faiss()
    faiss.write_index(faiss.IndexFlatIP(4), str(tmp_path / "i.faiss"))
    with pytest.raises(RuntimeError, match="--backend torch"):
        FaissBackend.load(tmp_path / "i.faiss", gpu=True)


@pytest.mark.gpu
def test_torch_backend_on_gpu_matches_cpu(vectors):
    gpu = TorchBackend(vectors, ["cuda:0"]).search(vectors[:8], 5)
    cpu = TorchBackend(vectors, ["cpu"]).search(vectors[:8], 5)
    np.testing.assert_array_equal(gpu[1][:, 0], cpu[1][:, 0])  # fp16 on GPU: compare the top hit only
    np.testing.assert_allclose(gpu[0], cpu[0], atol=2e-3)
