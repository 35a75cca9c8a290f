package fake

import (
	"encoding/binary"

	"github.com/valyala/fastjson"
)

// Tokens for the prefix cache (cache.go). The fakes have no tokenizer, so a
// text prompt is cut into pieces of bytesPerToken bytes, the same count
// estimateTokens has always given: the pieces of a text's prefix are the
// first pieces of the text, so prompts that share a prefix share their
// first tokens, as a real tokenizer's would (but for the piece that straddles
// the end of the shared part). input_ids are tokens as given. A chat
// conversation is its messages' text in order (see messageBytes), so chats
// that share a system prompt share its tokens.
//
// The cache works on blocks of Config.PageSize tokens, as SGLang's radix
// cache works on pages: a block's hash covers the hash of the block before
// it and its own tokens, so a block matches only with its whole prefix.
// Only full blocks are hashed: a partial last block is never cached, as
// SGLang with a page size above 1 caches only whole pages.

// bytesPerToken is the size of a text token: ceil(bytes/4) tokens per text.
const bytesPerToken = 4

// FNV-1a's 64-bit parameters: a hash with no seed, so the same prompt
// hashes alike in every process and run.
const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

// blockHasher hashes a stream of units (bytes of text, or token ids as 8
// bytes each) into the chained hashes of its full blocks of size units.
type blockHasher struct {
	size   int // units per block
	n      int // units in the current block
	h      uint64
	blocks []uint64
}

func newBlockHasher(size int) blockHasher {
	return blockHasher{size: size, h: fnvOffset}
}

// unit adds one unit of the stream, given as its bytes.
func (bh *blockHasher) unit(b []byte) {
	for _, c := range b {
		bh.h = (bh.h ^ uint64(c)) * fnvPrime
	}
	bh.n++
	if bh.n == bh.size {
		bh.blocks = append(bh.blocks, bh.h)
		// The next block starts from this block's hash: the chain.
		bh.h = (bh.h ^ 0xff) * fnvPrime
		bh.n = 0
	}
}

// text adds bytes of text, one unit each.
func (bh *blockHasher) text(b []byte) {
	for i := range b {
		bh.unit(b[i : i+1])
	}
}

// textBlocks is the chained block hashes of a text prompt, with pageSize
// tokens of bytesPerToken bytes per block.
func textBlocks(b []byte, pageSize int) []uint64 {
	bh := newBlockHasher(pageSize * bytesPerToken)
	bh.text(b)
	return bh.blocks
}

// idBlocks is the chained block hashes of a list of token ids.
func idBlocks(ids *fastjson.Value, pageSize int) []uint64 {
	bh := newBlockHasher(pageSize)
	var buf [8]byte
	for _, id := range ids.GetArray() {
		binary.LittleEndian.PutUint64(buf[:], uint64(id.GetInt64()))
		bh.unit(buf[:])
	}
	return bh.blocks
}

// chatBlocks is the chained block hashes of a conversation: its messages'
// text in order, as messageBytes counts it.
func chatBlocks(m *fastjson.Value, pageSize int) []uint64 {
	bh := newBlockHasher(pageSize * bytesPerToken)
	eachMessageText(m, bh.text)
	return bh.blocks
}
