"""Stand-ins for what a PySpark Python worker and driver see, so the spark family's GPU paths run without a GPU:
a task's context with the resources Spark gave it, and the errors a worker's CUDA out-of-memory becomes in the
driver (texts shaped as real PySpark 4.3.0 runs printed them when the predict function raised
``torch.OutOfMemoryError`` with the CUDA caching allocator's message: the same lines, with the family's own frames
in the traceback)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class ResourceInformation:
    """``pyspark.resource.ResourceInformation``: a resource's name and its addresses, strings (a GPU's are its
    indices: ``["2"]``)."""

    name: str
    addresses: list[str]


@dataclass
class FakeTaskContext:
    """``pyspark.TaskContext`` as a Python worker sees it during a task (pyspark/taskcontext.py: ``resources()`` is
    a dict of resource name -> ResourceInformation, ``cpus()`` is ``spark.task.cpus``). Spark's local mode gives a
    task no resources ("local mode doesn't support extra resources like GPUs right now",
    core/.../scheduler/local/LocalSchedulerBackend.scala, LocalEndpoint): ``gpus=None`` is that case."""

    gpus: list[str] | None = None
    task_cpus: int = 1
    extra: dict[str, ResourceInformation] = field(default_factory=dict)

    def resources(self) -> dict[str, ResourceInformation]:
        found = dict(self.extra)
        if self.gpus is not None:
            found["gpu"] = ResourceInformation("gpu", list(self.gpus))
        return found

    def cpus(self) -> int:
        return self.task_cpus


# str() of the pyspark.errors.exceptions.captured.PythonException that DataFrame.collect() raised in the driver when a
# predict_batch_udf's predict function raised torch.OutOfMemoryError in the Python worker (PySpark 4.3.0,
# torch 2.13; PythonException.__str__ is f"{msg}:\n{traceback}"). The message is the one torch's CUDA caching
# allocator raises (c10/cuda/CUDACachingAllocator.cpp, "CUDA out of memory. Tried to allocate ...").
CUDA_OOM_MESSAGE = (
    "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which 1.06 GiB is "
    "free. Including non-PyTorch memory, this process has 78.12 GiB memory in use. Of the allocated memory 76.50 GiB "
    "is allocated by PyTorch, and 1.02 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory "
    "is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation "
    "for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)")

WORKER_CUDA_OOM = (
    "An exception was thrown from the Python worker:\n"
    "Traceback (most recent call last):\n"
    '  File "/venv/lib/python3.11/site-packages/pyspark/ml/functions.py", line 823, in predict\n'
    "    preds = predict_fn(single_input)\n"
    "            ^^^^^^^^^^^^^^^^^^^^^^^^\n"
    '  File "/repo/src/hwregress/spark/predictor.py", line 137, in predict\n'
    "    classes, logits = predictor(pixels)\n"
    "                      ^^^^^^^^^^^^^^^^^\n"
    f"torch.OutOfMemoryError: {CUDA_OOM_MESSAGE}")

# str() of the StreamingQueryException that StreamingQuery.exception() returned for the same failure in a
# Structured Streaming query (PySpark 4.3.0), up to the query's description
STREAM_CUDA_OOM = (
    "[PYTHON_EXCEPTION] An exception was thrown from the Python worker: Traceback (most recent call last):\n"
    '  File "/venv/lib/python3.11/site-packages/pyspark/ml/functions.py", line 823, in predict\n'
    "    preds = predict_fn(single_input)\n"
    "            ^^^^^^^^^^^^^^^^^^^^^^^^\n"
    '  File "/repo/src/hwregress/spark/predictor.py", line 137, in predict\n'
    "    classes, logits = predictor(pixels)\n"
    "                      ^^^^^^^^^^^^^^^^^\n"
    f"torch.OutOfMemoryError: {CUDA_OOM_MESSAGE}\n"
    " SQLSTATE: 38000\n"
    "=== Streaming Query ===\n"
    "Identifier: [id = 23be4143-dbba-47c9-bb05-07550980367d, runId = 4c803550-460a-47ec-a04a-3b7f13462c78]\n"
    "Current Committed Offsets: {}\n"
    "Current State: ACTIVE\n"
    "Thread State: RUNNABLE\n")

# a worker's plain bug, as the same PythonException carries it
WORKER_VALUE_ERROR = (
    "An exception was thrown from the Python worker:\n"
    "Traceback (most recent call last):\n"
    '  File "/venv/lib/python3.11/site-packages/pyspark/ml/functions.py", line 823, in predict\n'
    "    preds = predict_fn(single_input)\n"
    "ValueError: expected 64 pixels per row, got 63")

# the driver JVM's own heap ran out (a Py4JJavaError's text): Spark's memory settings, not the device under test
JVM_HEAP_OOM = (
    "An error occurred while calling o97.collectToPython.\n"
    ": java.lang.OutOfMemoryError: Java heap space\n"
    "\tat java.base/java.util.Arrays.copyOf(Arrays.java:3537)\n"
    "\tat org.apache.spark.sql.execution.SparkPlan.executeCollect(SparkPlan.scala:461)\n")


class PythonException(Exception):
    """Stands for ``pyspark.errors.exceptions.captured.PythonException`` (or a ``Py4JJavaError``): what the driver
    catches; only its text says what the worker raised."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text

    def __str__(self) -> str:
        return self.text


class FakeStreamingQuery:
    """A ``pyspark.sql.streaming.StreamingQuery`` that failed with ``error`` (``exception()``), or runs without one."""

    def __init__(self, error: BaseException | None) -> None:
        self.error = error
        self.isActive = error is None

    def exception(self) -> BaseException | None:
        return self.error

    def processAllAvailable(self) -> None:
        self.drained = True


class QueryFailingBetweenReads(FakeStreamingQuery):
    """A streaming query that fails with ``error`` just after a caller has read ``exception()`` (None) and before it
    reads ``isActive``: Spark's query thread records the error, then marks the query terminated
    (``StreamExecution.runStream``: ``streamDeathCause`` is set before ``state`` becomes ``TERMINATED``), on its own
    thread, at any moment of the driver's poll."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(None)
        self.pending = error

    def exception(self) -> BaseException | None:
        seen, self.error = self.error, self.error or self.pending
        self.isActive = False
        return seen
