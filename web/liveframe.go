package web

// The markup of views.FrameLiveBlocks and views.FrameLiveTail around their HTML, written
// directly by appendLiveFrame instead of through templ (TestFrameMarkup keeps them equal).
const (
	liveBlocksOpen = `<div hx-swap-oob="beforeend:#msg-live-blocks">`
	liveTailOpen   = `<div id="msg-live-tail" hx-swap-oob="morph">`
	liveFrameClose = `</div>`
)

// appendLiveFrame returns one frame of prefix (e.g. a reasoning frame), then the blocks
// frame if withBlocks, then the tail frame if withTail, or nil if that is empty. It
// allocates the frame once, at its final size.
func appendLiveFrame(prefix []byte, withBlocks bool, blocks string, withTail bool, tail string) []byte {
	n := len(prefix)
	if withBlocks {
		n += len(liveBlocksOpen) + len(blocks) + len(liveFrameClose)
	}
	if withTail {
		n += len(liveTailOpen) + len(tail) + len(liveFrameClose)
	}
	if n == 0 {
		return nil
	}
	frame := make([]byte, 0, n)
	frame = append(frame, prefix...)
	if withBlocks {
		frame = append(frame, liveBlocksOpen...)
		frame = append(frame, blocks...)
		frame = append(frame, liveFrameClose...)
	}
	if withTail {
		frame = append(frame, liveTailOpen...)
		frame = append(frame, tail...)
		frame = append(frame, liveFrameClose...)
	}
	return frame
}
