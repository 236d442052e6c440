"""The English text the tiny target is trained on (written for this project).

Short plain paragraphs about the things a user of this project meets: speculative
decoding, GPUs, servers, the weather, numbers. Each demo prompt (and the launcher's
spec-check prompt) opens one paragraph, so the target's greedy continuation of a
prompt is that paragraph, and after it the next one: readable text, not noise.
"""

from __future__ import annotations

CORPUS = [
    "Hello, my name is Eagle. I am a small model that runs on the CPU. "
    "I help a large model write text faster by guessing the next few words.",
    "The capital of France is Paris. The capital of Italy is Rome. "
    "The capital of Spain is Madrid. The capital of Japan is Tokyo.",
    "Once upon a time there was a little robot who liked to count. "
    "It counted one, two, three, four, five, and then it went to sleep.",
    "def fibonacci(n):\n    if n < 2:\n        return n\n"
    "    return fibonacci(n - 1) + fibonacci(n - 2)\n",
    "Speculative decoding works by letting a small draft model guess the next tokens. "
    "The large target model checks all of the guesses in one forward pass.",
    "The weather today is sunny and warm with a light wind. "
    "Tomorrow it will rain in the morning and the sky will clear at night.",
    "Question: what is two plus two? Answer: two plus two is four. "
    "Question: what is three plus four? Answer: three plus four is seven.",
    "A tree of candidates is checked at once. The longest accepted path is kept "
    "and the rest of the tree is thrown away.",
    "The quick brown fox jumps over the lazy dog. The dog sleeps in the sun "
    "and the fox runs back to the woods.",
    "The accept length is the number of tokens the target model keeps in one step. "
    "A good draft model has a long accept length.",
    "A GPU runs many small programs at the same time. The server sends the model "
    "to the GPU and the GPU does the math.",
    "When the draft model is right, the target model keeps its tokens and the text "
    "comes out faster. When the draft model is wrong, the target model writes the "
    "token itself.",
    "The server is ready when the model is loaded and the first request is done. "
    "Then it answers every request that comes in.",
    "The profile shows how long each step takes: the draft, the verify and the "
    "extend. The report turns the profile into a table.",
    "The benchmark sends the same prompts to the server and counts the tokens per "
    "second. More tokens per second is better.",
    "One plus one is two. Two plus two is four. Four plus four is eight. "
    "Eight plus eight is sixteen.",
    "It is cold in the winter and hot in the summer. In the spring the rain "
    "makes the grass green, and in the fall the leaves turn red.",
    "The little robot liked to read. Every night it read a book about the sea, "
    "the sun and the stars.",
]

# Fixed prompts for demos and tests (also the build-time measurement set).
DEMO_PROMPTS = [
    "Hello, my name is",
    "The capital of France is",
    "Once upon a time",
    "def fibonacci(n):",
    "Speculative decoding works by",
    "The weather today",
    "Question: what is two plus two?",
    "A tree of candidates",
]
