# `stead bench knowledge`'s peer: Python onnxruntime on the same model.onnx and the same token
# ids Stead's tokenizer produced, the same batching (padded to each batch's longest), mean
# pooling and L2 normalisation in NumPy. Prints one JSON line.
import json, sys, time
import numpy as np
import onnxruntime as ort

job = json.load(open(sys.argv[1]))
options = ort.SessionOptions()
options.intra_op_num_threads = job["threads"]
options.inter_op_num_threads = 1
options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
session = ort.InferenceSession(job["model"], options, providers=["CPUExecutionProvider"])
names = {i.name for i in session.get_inputs()}


def embed(rows):
    seq = max(len(r) for r in rows)
    ids = np.zeros((len(rows), seq), dtype=np.int64)
    mask = np.zeros((len(rows), seq), dtype=np.int64)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = r
        mask[i, : len(r)] = 1
    feed = {"input_ids": ids, "attention_mask": mask}
    if "token_type_ids" in names:
        feed["token_type_ids"] = np.zeros_like(ids)
    hidden = session.run(None, feed)[0]
    m = mask[:, :, None].astype(np.float32)
    pooled = (hidden * m).sum(axis=1) / np.maximum(m.sum(axis=1), 1.0)
    return pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)


rows, batch = job["rows"], job["batch"]
embed(rows[:batch])  # warm-up
started = time.perf_counter()
first = None
for start in range(0, len(rows), batch):
    out = embed(rows[start : start + batch])
    if first is None:
        first = out[0]
seconds = time.perf_counter() - started
print(json.dumps({"seconds": seconds, "chunks_per_s": len(rows) / seconds, "first": first.tolist(),
                  "onnxruntime": ort.__version__}))
