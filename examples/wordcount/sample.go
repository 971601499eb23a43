package main

// sampleText is the text the embedded run counts.
func sampleText() []string {
	text := []string{
		"The river bends below the weir, and the water slows before it falls.",
		"A weir holds the river back just enough to keep its level; the rest flows on.",
		"Streams of records flow like water: what matters is that nothing is lost and nothing counted twice.",
		"State lives beside the stream, and the changelog remembers every change the state has seen.",
		"When a worker stops, another picks up its tasks, restores the state, and the counting goes on.",
	}
	var lines []string
	for i := range 40 {
		lines = append(lines, text[i%len(text)])
	}
	return lines
}
