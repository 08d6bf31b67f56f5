package guard

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
)

// tagMemo remembers the subject tags of the subjects the deny cache holds
// a denial of, so that an attacker's repeat finds its denial without the
// keyed hash (HMAC-SHA256: two blocks, half of a cached denial's work).
// It maps the bytes a tag is hashed from (dimensions and values, see
// subjectBytes) to the tag, keyed by two 64-bit hashes of those bytes
// (hash/maphash, AES-based where the CPU has AES) under seeds of this
// process's own, never shown: it holds no identifier, and a stranger who
// wanted another subject's tag to answer for theirs would have to find
// bytes whose two hashes both match the other's. (Two seeds guard
// against chance; a collision of the hash that held whatever the seed,
// none known, would defeat both.) It is filled only when the deny cache
// keeps a learned denial (Guard.rememberTag), never by allowed traffic,
// and bounded like the deny cache: full, it starts again empty (puts
// racing the reset may leave a few more). A tag never changes (the
// secret is fixed at New), so nothing it holds is ever wrong, only
// forgotten.
type tagMemo struct {
	seeds [2]maphash.Seed
	m     sync.Map // memoKey → tagKey
	n     atomic.Int64
	size  int64
	reset sync.Mutex
}

type memoKey [2]uint64

func newTagMemo(size int) *tagMemo {
	return &tagMemo{seeds: [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}, size: int64(size)}
}

func (t *tagMemo) key(b []byte) memoKey {
	return memoKey{maphash.Bytes(t.seeds[0], b), maphash.Bytes(t.seeds[1], b)}
}

// get returns the tag of the subject bytes b, if remembered.
func (t *tagMemo) get(b []byte) (tagKey, bool) {
	if t.n.Load() == 0 {
		return tagKey{}, false
	}
	v, ok := t.m.Load(t.key(b))
	if !ok {
		return tagKey{}, false
	}
	return v.(tagKey), true
}

// put remembers tag as the tag of the subject bytes b.
func (t *tagMemo) put(b []byte, tag tagKey) {
	if t.n.Load() >= t.size {
		t.reset.Lock()
		if t.n.Load() >= t.size {
			t.m.Clear()
			t.n.Store(0)
		}
		t.reset.Unlock()
	}
	if _, loaded := t.m.Swap(t.key(b), tag); !loaded {
		t.n.Add(1)
	}
}

// subjectTag is the tag of the subject's values of dims, as hashValues
// hashes them, formatted into the hash's buffer instead of strings.
// A subject whose denial the deny cache holds has its tag remembered (see
// tagMemo): its repeat is not hashed again.
func (g *Guard) subjectTag(dims []string, s Subject) (k tagKey) {
	m := g.macs.Get().(*macState)
	b := g.subjectBytes(m.buf[:0], dims, s)
	if g.memo != nil {
		if t, ok := g.memo.get(b); ok {
			m.buf = b
			g.macs.Put(m)
			return t
		}
	}
	k = m.tag(b)
	g.macs.Put(m)
	return k
}

// subjectBytes appends to b what a subject's tag is hashed from: each of
// dims and the subject's value of it.
func (g *Guard) subjectBytes(b []byte, dims []string, s Subject) []byte {
	for _, dim := range dims {
		b = append(b, dim...)
		b = append(b, 0)
		b = g.appendDimension(b, dim, s)
		b = append(b, 0)
	}
	return b
}

// rememberTag remembers the tag of the subject's values of dims (see
// tagMemo), hashed here from the same bytes subjectTag hashes.
func (g *Guard) rememberTag(dims []string, s Subject) {
	if g.memo == nil {
		return
	}
	m := g.macs.Get().(*macState)
	b := g.subjectBytes(m.buf[:0], dims, s)
	g.memo.put(b, m.tag(b))
	g.macs.Put(m)
}
