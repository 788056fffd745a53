#!/usr/bin/python3
"""make_fixtures.py: the .npy fixtures of tests/datasets/test_npy.c, written by Debian's NumPy
(python3-numpy, run with /usr/bin/python3; the files are committed, this script documents them):
    cd tests/datasets/npy && /usr/bin/python3 make_fixtures.py
Every valid file holds v(i) = (i * 7 + 3) % 23 - 5 at flat index i (0 for unsigned types where
negative: (i * 7 + 3) % 23 for them; i % 2 for bool), so the test recomputes it."""
import numpy as np

def vals(n, kind):
    i = np.arange(n)
    if kind == 'b':
        return i % 2 == 1
    if kind == 'u':
        return (i * 7 + 3) % 23
    return (i * 7 + 3) % 23 - 5

def save(name, shape, dtype, version=None):
    dt = np.dtype(dtype)
    v = vals(int(np.prod(shape)), dt.kind)
    if dt.kind == 'f':
        v = v / 4  # quarters: exact in f32 and f64
    a = v.astype(dt).reshape(shape)
    with open(name, 'wb') as f:
        if version is None:
            np.save(f, a)
        else:
            np.lib.format.write_array(f, a, version=version)

for t in ['<f4', '<f8', '|i1', '|u1', '<i2', '<u2', '<i4', '<u4', '<i8', '<u8', '|b1']:
    save('le_%s.npy' % t[1:], (2, 3, 4), t)
for t in ['>f4', '>f8', '>i2', '>u2', '>i4', '>u4', '>i8', '>u8']:
    save('be_%s.npy' % t[1:], (3, 5), t)
save('v2_f4.npy', (4, 2), '<f4', (2, 0))
save('v3_f4.npy', (4, 2), '<f4', (3, 0))
save('scalar_f8.npy', (), '<f8')
save('empty_f4.npy', (0, 3), '<f4')
save('vector_i8.npy', (6,), '<i8')
# data set pairs: x (n, 2, 2) f32, y (n) int64 labels in 0..2 (NumPy's default integer)
np.save('pair_x.npy', (np.arange(24, dtype=np.float32) / 8).reshape(6, 2, 2))
np.save('pair_y.npy', np.arange(6) % 3)
# files strix refuses
np.save('bad_fortran.npy', np.asfortranarray(np.arange(6, dtype=np.float32).reshape(2, 3)))
np.save('bad_object.npy', np.array([1, 'a', None], dtype=object), allow_pickle=True)
np.save('bad_structured.npy', np.zeros(3, dtype=[('a', '<f4'), ('b', '<i4')]))
np.save('bad_complex.npy', np.zeros(3, dtype=np.complex64))
np.save('bad_f16.npy', np.zeros(3, dtype=np.float16))
np.save('bad_rank9.npy', np.zeros((1,) * 9, dtype=np.float32))
with open('le_f4.npy', 'rb') as f:
    whole = f.read()
with open('bad_truncated.npy', 'wb') as f:
    f.write(whole[:-5])
with open('bad_trailing.npy', 'wb') as f:
    f.write(whole + b'\0')
with open('bad_header_cut.npy', 'wb') as f:
    f.write(whole[:40])
# an absurd shape: the header announces 2^60 elements behind a valid prefix
hdr = b"{'descr': '<f4', 'fortran_order': False, 'shape': (1152921504606846976,), }"
hdr += b' ' * (118 - len(hdr)) + b'\n'
with open('bad_absurd.npy', 'wb') as f:
    f.write(b'\x93NUMPY\x01\x00' + len(hdr).to_bytes(2, 'little') + hdr + b'\0' * 16)
