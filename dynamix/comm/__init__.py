"""Lossless homomorphic gradient compression (LHC; Li et al., arXiv 2402.07529).

The engine's gradient synchronisation (:mod:`dynamix.engine.sync`) and the simulator's in-process
reduction (:mod:`dynamix.sim.cluster`) compress with it, and the window metrics
(:mod:`dynamix.metrics.window`) read its byte and codec-time counts; it imports no other part of
dynamix.

Modules, in data-flow order (a worker's flat gradient in, the decoded sum out):

- ``topk``     optional and LOSSY: top-k sparsification with error feedback for dense models,
               before the lossless step;
- ``bitmap``   the merged non-zero index: one bit per element, packed, OR-reduced across workers;
- ``hashing``  seeded count-sketch positions and signs, the same table on every rank;
- ``peel``     the peeling decoder: its schedule from the index alone, then the replay of the
               summed sketch along it;
- ``lhc``      one reduction of one flat gradient (index, sizing, encode, decode) with its sizing
               rule; its public names are re-exported here;
- ``native``   the C loops of ``codec.c`` (index, sketch positions, encoder, peel and replay),
               built on first use; without a compiler the tensor versions run.

Workers send (1) a bitmap of their non-zero gradient positions, OR-merged across workers, and
(2) a count sketch of their values sized from the merged density: 3 hashed counters per element,
each with a random sign. Both are *homomorphic*: the aggregate is a plain OR / SUM, so a ring
all-reduce or a parameter server sums the sketches without decoding them (the paper puts this on a
switch). Every worker then *peels* the summed sketch: from the merged index it knows how many
non-zeros hit each counter, reads the value of every counter holding one, subtracts it elsewhere and
repeats. The paper estimates what does not peel (median of 3, lossy); here the peel is run on the
index before any value is sent, and a bucket that would not peel gets a larger sketch or is sent
dense, so the result is never an estimate.

What is exact and what is not: the support and every densely sent bucket are exact; a peeled value
carries the float rounding of the counter sums it was read from (bit-exact for representable sums,
a few ulp of the largest magnitude sharing its counters otherwise). :mod:`dynamix.comm.lhc` has the
sizing rule, :mod:`dynamix.comm.peel` the decoder; docs/journal/compression.md the measured numbers.

Layout difference from the public kernels: they hash a 1,024-element block to 3 sketch rows and keep
each element's column, which makes every column an independent peeling problem of ~G p items
(G blocks, density p), so sizes must cover the fullest column. Here each element is hashed on its
own within its bucket's sketch, one large peeling graph per bucket with a sharp threshold.
"""

from dynamix.comm.lhc import (  # noqa: F401
    BUCKET, Codec, Plan, Stats, counters, index_flags, index_words, make_plan, reduce_in_process,
)
