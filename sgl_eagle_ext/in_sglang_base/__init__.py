"""The base of everything that runs inside SGLang's processes: the patching base
(patching.py), the feature registry (registry.py) and the profile flush signal
(profile_flush.py). It sits below its users (profiling/recorder/, cpu/, in_sglang/)
so that none of them imports another sideways or upwards. Same rules as in_sglang/:
import SGLang lazily, never raise into SGLang, never import launcher/ or tools/."""
