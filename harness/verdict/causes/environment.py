"""Causes of kind environment: the machine, the install, the network or the Hub failed the boot. The cell is `error`
(the run still exits 1): nothing here says the configuration cannot boot, and a night must not read it so.

Most of these words are not vLLM's: huggingface_hub's and transformers' errors, torch's and the CUDA runtime's, NCCL's,
argparse's and the OS's, as each library words them.
"""

from __future__ import annotations

import re

from .model import WEAK, Also, Cause, CauseKind, Numbers, Pattern, read_groups

K = CauseKind.environment
_REPO = r"(?:https?://huggingface\.co/(?:api/models/)?)?(?P<model>[\w.-]{1,96}/[\w.-]{1,96})"
#: The Hub answers 401 for a repo that does not exist as for a gated one (it does not say which private names exist):
#: huggingface_hub tells them apart and says "Repository Not Found" on the same line or the next (with the advice "If
#: you are trying to access a private or gated repo, make sure you are authenticated": not a gated model's line).
_NOT_FOUND_MARKS = ("RepositoryNotFoundError", "Repository Not Found")
#: The repo a Hub URL names ("https://huggingface.co/Qwen/Qwen3-8B/resolve/main/config.json", ".../api/models/x/y").
_HUB_URL_MODEL = r"huggingface\.co/(?:api/models/)?([\w.-]{1,96}/[\w.-]{0,95}[\w-])"
#: A model argument that names a directory on this machine, not a Hub id.
_LOCAL = re.compile(r"\A(?:[/~.\\]|[A-Za-z]:[\\/])")
#: The files whose absence means "no config": the rest a local folder lacks (remote code, weights) make it incomplete.
_CONFIG_FILES = frozenset({"config.json", "params.json"})


def _refused_by_hub(message: str, m: re.Match[str]) -> Numbers | None:
    """A 401/403 is a gated model unless the line says the repository does not exist."""
    return None if any(mark in message for mark in _NOT_FOUND_MARKS) else read_groups(message, m)


def _hub_id(message: str, m: re.Match[str]) -> Numbers | None:
    """"Invalid repository ID or local directory specified: 'X'": X not a path is a Hub id that is not there."""
    numbers = read_groups(message, m)
    return None if _LOCAL.match(str(numbers.get("model", "/"))) else numbers


def _no_config(message: str, m: re.Match[str]) -> Numbers | None:
    """"P does not appear to have a file named F": no config when F is the config, or P is a Hub repo; a local folder
    lacking another file (the remote code its config names, a weight index) is an incomplete local folder."""
    numbers = read_groups(message, m)
    if numbers.get("file") not in _CONFIG_FILES and _LOCAL.match(str(numbers.get("path", ""))):
        return None
    return numbers

GATED_MODEL = Cause(
    "gated_model", K,
    "the Hub refused the download: a gated or private model and no (or a wrong) token (401/403, GatedRepoError)",
    (Pattern("GatedRepoError"),
     Pattern("gated repo", r"[Gg]ated repo(?: for url)?[^\n]{0,40}?" + _REPO + r"|ated repo", read=_refused_by_hub),
     Pattern("401 Client Error", r"401 Client Error[^\n]{0,120}?(?:" + _REPO + r"|\Z|\.)", read=_refused_by_hub),
     Pattern("403 Client Error", r"403 Client Error[^\n]{0,120}?(?:" + _REPO + r"|\Z|\.)", read=_refused_by_hub),
     Pattern("is restricted", r"Access to model (?P<model>\S{1,200}) is restricted"),
     Pattern("Invalid credentials in Authorization header"),
     Pattern("Invalid user token")),
    ("the Hub refused {model}: accept its licence on the Hub and pass HF_TOKEN",
     "the Hub refused the download: accept the model's licence and pass HF_TOKEN"),
    numbers=("model", "http_status"),
    also=(Also("http_status", r"\b(40[13]) Client Error", int), Also("model", _HUB_URL_MODEL)),
    examples=("huggingface_hub.errors.GatedRepoError: 401 Client Error. (Request ID: Root=1-6)",
              "Cannot access gated repo for url https://huggingface.co/meta-llama/Llama-3.1-8B/resolve/main/"
              "config.json.",
              "OSError: You are trying to access a gated repo.",
              "requests.exceptions.HTTPError: 403 Client Error: Forbidden for url: https://huggingface.co/api/models/"
              "google/gemma-2-9b"))

MODEL_NOT_FOUND = Cause(
    "model_not_found", K,
    "the model id is not on the Hub (a typo, a private repo without access, a wrong revision: 404, "
    "RepositoryNotFoundError)",
    (Pattern("RepositoryNotFoundError"),
     Pattern("Repository Not Found", r"Repository Not Found for url:?\s*" + _REPO + r"|Repository Not Found"),
     Pattern("404 Client Error", r"404 Client Error[^\n]{0,120}?(?:" + _REPO + r"|\Z|\.)"),
     Pattern("is not a valid model identifier", r"'?(?P<model>[^'\s]{1,200})'? is not a local folder and is not a "
             r"valid model identifier"),
     Pattern("RevisionNotFoundError"),
     Pattern("EntryNotFoundError"),
     # vLLM's own check (0.8+): neither a local folder nor a repo on the Hub; a name that is not a path is the latter
     Pattern("Invalid repository ID or local directory", r"Invalid repository ID or local directory specified:?\s*"
             r"'?(?P<model>[^'\s]{1,300}?)'?(?:\.?\s|\.?\Z|\.$)", read=_hub_id)),
    ("{model} is not on the Hub (or not visible to this token): check the id", "the model is not on the Hub"),
    numbers=("model", "http_status"),
    also=(Also("http_status", r"\b(40[134]) Client Error", int), Also("model", _HUB_URL_MODEL)),
    examples=("huggingface_hub.errors.RepositoryNotFoundError: 404 Client Error. (Request ID: Root=1-66)",
              "OSError: facebook/opt-126m is not a local folder and is not a valid model identifier listed on "
              "'https://huggingface.co/models'",
              "ValueError: Invalid repository ID or local directory specified: 'Qwen3-8B-typo'."))

BAD_LOCAL_PATH = Cause(
    "bad_local_path", K,
    "the model path is neither a directory on this machine nor a Hub id, or it holds no weight files (\"Invalid "
    "repository ID or local directory specified\", HFValidationError, \"Cannot find any model weights\"); vLLM "
    "0.32 words a directory without config.json the same way",
    (Pattern("Invalid repository ID or local directory", r"Invalid repository ID or local directory specified:?\s*"
             r"'?(?P<path>[^'\s]{1,300})"),
     # the path is the last quoted name before a full stop (the form's own 'repo_name' examples are quoted too)
     Pattern("Repo id must", r"Repo id must (?:be in the form|use alphanumeric)(?:.{0,300}'(?P<path>[^']{1,300})'"
             r"(?:\.|\Z))?"),
     # a traceback's `raise HFValidationError(` names no path: the message does
     Pattern("HFValidationError", rank=WEAK),
     Pattern("Cannot find any model weights", r"Cannot find any model weights with `?(?P<path>[^`\s]{1,300})"),
     # transformers' catch-all for a local path (configuration_utils.py: "make sure '<path>' is the correct path to a
     # directory containing a config.json file"): the folder is missing here (a volume not mounted) or holds no config
     Pattern("Can't load the configuration of", r"Can't load the configuration of '(?P<path>[/.~][^']{0,300})'"),
     # a local folder that lacks a file its config needs (MISSING_CONFIG_JSON leaves it here)
     Pattern("does not appear to have a file named", r"(?P<path>\S{1,300}) does not appear to have a file named "
             r"(?P<file>[\w-]{1,60}(?:\.[A-Za-z]\w{0,9})?)")),
    ("the model folder {path} has no {file}: copy the model whole (with its code files) or fix the path",
     "the model path {path} is not a model directory here (missing, or no config.json in it): mount it or fix "
     "the path",
     "the model path is not a model directory here (missing, or no config.json in it): mount it or fix the path"),
    numbers=("path", "file"),
    examples=("OSError: /models/deepseek-r1 does not appear to have a file named configuration_deepseek.py. Checkout "
              "'https://huggingface.co//models/deepseek-r1/tree/None' for available files.",
              "OSError: Can't load the configuration of '/model'. If you were trying to load it from",
              "ValueError: Invalid repository ID or local directory specified: '/models/nope'. Please verify the "
              "following requirements:",
              "huggingface_hub.errors.HFValidationError: Repo id must be in the form 'repo_name' or "
              "'namespace/repo_name': '/models/nope/x'. Use `repo_type` argument if needed.",
              "RuntimeError: Cannot find any model weights with `/models/empty`"))

MISSING_CONFIG_JSON = Cause(
    "missing_config_json", K,
    "the model directory (or repo) has no config.json (\"does not appear to have a file named config.json\")",
    (Pattern("does not appear to have a file named", r"(?P<path>\S{1,300}) does not appear to have a file named "
             r"(?P<file>[\w-]{1,60}(?:\.[A-Za-z]\w{0,9})?)", read=_no_config),
     # transformers' catch-all for a name it could not load: a Hub id here (a local path is BAD_LOCAL_PATH's)
     Pattern("Can't load the configuration of", r"Can't load the configuration of '(?P<path>(?![/.~])[^']{1,300})'"),
     # 0.7+ (get_config with config_format auto): neither config.json nor params.json
     Pattern("Could not detect config format", r"Could not detect config format for no config file found"),
     Pattern("No supported config format found", r"No supported config format found in (?P<path>\S{1,300})")),
    ("{path} has no {file}: point the server at the model's directory",
     "{path} has no config.json: point the server at the model's directory",
     "the model has no config.json"),
    numbers=("path", "file"),
    examples=("OSError: /models/x does not appear to have a file named config.json. Checkout "
              "'https://huggingface.co//models/x/tree/None' for available files.",
              "ValueError: No supported config format found in /models/x",
              "ValueError: Could not detect config format for no config file found. With config_format 'auto', "
              "ensure your model has either config.json (HF format) or params.json (Mistral format)."))

HF_OFFLINE_NO_CACHE = Cause(
    "hf_offline_no_cache", K,
    "the Hub could not be reached (offline mode, no network, a proxy) and the files are not in the cache",
    (Pattern("We couldn't connect to"),
     Pattern("LocalEntryNotFoundError"),
     Pattern("outgoing traffic has been disabled"),
     Pattern("Cannot find an appropriate cached snapshot folder"),
     Pattern("offline mode is enabled", flags=re.I),
     Pattern("Max retries exceeded with url", r"host='huggingface\.co'.{0,80}Max retries exceeded|Max retries exceeded"
             r" with url: /(?:api/models|[\w.-]{1,96}/[\w.-]{1,96}/resolve)"),
     Pattern("huggingface.co", r"(?:ConnectionError|ConnectTimeout|ReadTimeout|NameResolutionError)\W.{0,200}"
             r"huggingface\.co", rank=WEAK)),
    ("the Hub is unreachable and the model is not cached: download it first or mount the cache (HF_HOME)",),
    numbers=("model",),
    also=(Also("model", r"huggingface\.co/(?:api/models/)?([\w.-]{1,96}/[\w.-]{1,96})"),),
    examples=("OSError: We couldn't connect to 'https://huggingface.co' to load this file, couldn't find it in the "
              "cached files and it looks like Qwen/Qwen2-7B is not the path to a directory containing a file named "
              "config.json.",
              "huggingface_hub.errors.LocalEntryNotFoundError: Cannot find an appropriate cached snapshot folder for "
              "the specified revision on the local disk and outgoing traffic has been disabled."))

TOKENIZER_ERROR = Cause(
    "tokenizer_error", K,
    "the tokenizer's files will not load (missing, or a tokenizers/transformers release that cannot read them)",
    (Pattern("Can't load tokenizer", r"Can't load tokenizer(?: for '(?P<model>[^']{1,200})')?"),
     Pattern("Failed to load the tokenizer"),
     Pattern("Couldn't instantiate the backend tokenizer"),
     Pattern("did not match any variant of untagged enum"),
     Pattern("does not exist or is not currently imported", r"Tokenizer class (?P<tokenizer>\w{1,80}) does not exist "
             r"or is not currently imported")),
    ("the tokenizer will not load: check the model's tokenizer files and the tokenizers release",),
    numbers=("model", "tokenizer"),
    examples=("OSError: Can't load tokenizer for 'mistralai/x'. If you were trying to load it from "
              "'https://huggingface.co/models', make sure you don't have a local directory with the same name.",
              "Exception: data did not match any variant of untagged enum ModelWrapper at line 1251003 column 3"))

TRANSFORMERS_TOO_OLD = Cause(
    "transformers_too_old", K,
    "the installed transformers does not know the model's type (\"Transformers does not recognize this "
    "architecture\")",
    (Pattern("does not recognize this architecture", r"has model type `?(?P<model_type>[\w-]{1,80})`? but Transformers "
             r"does not recognize this architecture|does not recognize this architecture"),
     Pattern("pip install --upgrade transformers"),
     Pattern("requires transformers", r"requires `?transformers\s*>=?\s*(?P<version>[\d.]{1,20})"),
     Pattern("Unrecognized model in", r"Unrecognized model in (?P<path>\S{1,300})\. Should have a `model_type` key")),
    ("transformers does not know model type {model_type}: upgrade transformers (or vLLM)",
     "transformers is too old for this model: upgrade it (or vLLM)"),
    numbers=("model_type", "version"),
    examples=("ValueError: The checkpoint you are trying to load has model type `qwen3` but Transformers does not "
              "recognize this architecture. This could be because of an issue with the checkpoint, or because your "
              "version of Transformers is out of date.",))

MODEL_INSPECTION_FAILED = Cause(
    "model_inspection_failed", K,
    "the subprocess vLLM inspects the model's class in crashed (\"Model architectures ['X'] failed to be inspected\"); "
    "its own error, when shown, is printed above it",
    (Pattern("failed to be inspected", r"Model architectures?\s*\[?'?(?P<architecture>[\w.]{1,80})'?\]? failed to be "
             r"inspected", rank=WEAK),
     Pattern("Error raised in subprocess", rank=WEAK),
     Pattern("Error in inspecting model architecture", r"Error in inspecting model architecture(?: '(?P<architecture>"
             r"[\w.]{1,80})')?", rank=WEAK)),
    ("inspecting {architecture} crashed in a subprocess: its error is above, or run `python -c 'import vllm'`",
     "inspecting the model crashed in a subprocess: its error is above, or run `python -c 'import vllm'`"),
    numbers=("architecture",),
    examples=("ValueError: Model architectures ['Qwen2ForCausalLM'] failed to be inspected. Please check the logs for "
              "more details.",))

NO_GPU_VISIBLE = Cause(
    "no_gpu_visible", K,
    "the server sees no GPU (no device passed to the container, CUDA_VISIBLE_DEVICES empty, no driver): \"Failed to "
    "infer device type\", \"No CUDA GPUs are available\"",
    (Pattern("Failed to infer device type"),
     # its wording before 0.4 (0.3.3 `config.py`, DeviceConfig: torch.cuda.is_available() false, no Neuron)
     Pattern("No supported device detected"),
     Pattern("No CUDA GPUs are available"),
     Pattern("Found no NVIDIA driver"),
     Pattern("no CUDA-capable device is detected"),
     Pattern("NVIDIA Driver was not detected"),
     Pattern("Torch not compiled with CUDA enabled"),
     Pattern("CUDA driver initialization failed"),
     Pattern("device_count() is 0", rank=WEAK),
     # vLLM 0.8.5+ logs it at INFO and goes on until something fails for want of a device: weak, any level
     Pattern("No platform detected, vLLM is running on UnspecifiedPlatform", rank=WEAK, any_level=True),
     # the container engine's own refusal: no NVIDIA runtime (nvidia-container-toolkit) for --gpus
     Pattern("could not select device driver"),
     # podman's: no CDI spec for the device asked (`nvidia-ctk cdi generate` never run, or not where podman looks)
     Pattern("unresolvable CDI devices"),
     # the NVIDIA runtime hook's: it cannot load the host driver's own libraries (no driver, or none it can see)
     Pattern("nvidia-container-cli: initialization error")),
    ("no GPU is visible to the server: pass the devices (--gpus / CUDA_VISIBLE_DEVICES) and check the driver",),
    examples=("RuntimeError: Failed to infer device type", "RuntimeError: No CUDA GPUs are available",
              "RuntimeError: No supported device detected.",
              "INFO 08-02 02:39:50 [__init__.py:248] No platform detected, vLLM is running on UnspecifiedPlatform",
              'docker: Error response from daemon: could not select device driver "" with capabilities: [[gpu]]',
              "Error: setting up CDI devices: unresolvable CDI devices nvidia.com/gpu=all",
              "nvidia-container-cli: initialization error: load library failed: libnvidia-ml.so.1: cannot open shared "
              "object file: no such file or directory: unknown"))

INVALID_DEVICE_ORDINAL = Cause(
    "invalid_device_ordinal", K,
    "a GPU index beyond the visible devices (\"CUDA error: invalid device ordinal\"): CUDA_VISIBLE_DEVICES names fewer "
    "GPUs than the server uses",
    (Pattern("invalid device ordinal"),),
    ("a GPU index is beyond the visible devices: check CUDA_VISIBLE_DEVICES against the parallel sizes",),
    examples=("RuntimeError: CUDA error: invalid device ordinal",))

DRIVER_MISMATCH = Cause(
    "driver_mismatch", K,
    "the NVIDIA driver is older than the CUDA runtime the image was built for (\"The NVIDIA driver on your system is "
    "too old\", \"CUDA driver version is insufficient\", error 803), or a GPU driver stack without a query the runtime "
    "needs (an Intel GPU that \"doesn't support querying the available free memory\")",
    (Pattern("driver on your system is too old", r"driver on your system is too old \(found version "
             r"(?P<driver_version>\d{1,8})\)|driver on your system is too old"),
     Pattern("CUDA driver version is insufficient"),
     Pattern("cudaErrorInsufficientDriver"),
     Pattern("unsupported display driver / cuda driver combination"),
     # cudaErrorSystemDriverMismatch by its number, as launchers and reporters word it ("Error 803: CUDA driver/display
     # driver mismatch")
     Pattern("rror 803", r"\b[Ee]rror 803\b"),
     Pattern("forward compatibility was attempted on non supported HW"),
     # the NVIDIA container hook refuses to start an image whose CUDA the driver is too old for
     Pattern("driver", r"unsatisfied condition: cuda\s*>=?\s*(?P<required_cuda>\d{1,3}\.\d{1,3})"),
     # an Intel GPU whose driver stack cannot report free memory (Level Zero's sysman; the maintainers' answer:
     # upgrade the driver)
     Pattern("doesn't support querying the available free memory")),
    ("the driver (found {driver_version}) is too old for this image's CUDA: upgrade the driver or use an older image",
     "the image needs CUDA {required_cuda}, newer than the driver supports: upgrade the driver or use an older image",
     "the driver is too old for this image's CUDA: upgrade the driver or use an older image"),
    numbers=("driver_version", "required_cuda", "cuda_error"),
    also=(Also("cuda_error", r"\b[Ee]rror (8\d\d)\b", int),),
    examples=("RuntimeError: The NVIDIA driver on your system is too old (found version 11040). Please update your GPU "
              "driver by downloading and installing a new version from the URL: http://www.nvidia.com/Download/"
              "index.aspx",
              "RuntimeError: CUDA driver version is insufficient for CUDA runtime version",
              'dynamo serve ... "Error 803: CUDA driver/display driver mismatch"',
              "nvidia-container-cli: requirement error: unsatisfied condition: cuda>=12.4, please update your driver "
              "to a newer version, or use an earlier cuda container: unknown."))

PINNED_MEMORY_UNAVAILABLE = Cause(
    "pinned_memory_unavailable", K,
    "the model runner needs pinned host memory mapped into the GPU (UVA) and this machine does not give it (WSL2, "
    "where vLLM leaves pinning off unless VLLM_WSL2_ENABLE_PIN_MEMORY=1): \"UVA is not available\"",
    (Pattern("UVA is not available"),),
    ("UVA (pinned host memory) is not available here: on WSL2 set VLLM_WSL2_ENABLE_PIN_MEMORY=1, or use the V1 model "
     "runner",),
    examples=("RuntimeError: UVA is not available",
              'raise RuntimeError("UVA is not available")'))

CUDA_LIB_MISMATCH = Cause(
    "cuda_lib_mismatch", K,
    "a CUDA library is missing or of another version than the build expects (\"libcudart.so.12: cannot open shared "
    "object file\", nvJitLink's undefined symbols)",
    (Pattern("cannot open shared object file", r"(?P<library>lib(?:cuda|cudart|cublas\w{0,8}|cudnn\w{0,12}|nccl|nvrtc|"
             r"cusparse\w{0,8}|cufft|curand|cusolver|nvJitLink|nvToolsExt|nvidia-ml)[\w.]{0,20}): cannot open shared "
             r"object file"),
     Pattern("undefined symbol", r"undefined symbol: (?P<symbol>__nvJitLink\w{1,80}|cuda\w{1,80}|nccl\w{1,80})"),
     Pattern("CUDA version mismatch", flags=re.I),
     # only a WARNING at import (≤0.6, _custom_ops.py): the boot fails later, when an op is called
     Pattern("Failed to import from vllm._C with ImportError",
             r"ImportError\('(?P<library>lib(?:cuda|cudart|cublas\w{0,8}|cudnn\w{0,12}|nccl|nvrtc|cusparse\w{0,8}|"
             r"cufft|curand|cusolver|nvJitLink|nvToolsExt|nvidia-ml)[\w.]{0,20}): cannot open shared object file",
             rank=WEAK, any_level=True)),
    ("{library} is missing or of another CUDA version: use the image's own CUDA libraries",
     "a CUDA library does not match the build ({symbol}): use the image's own CUDA libraries",
     "a CUDA library is missing or mismatched"),
    numbers=("library", "symbol"),
    examples=("ImportError: libcudart.so.12: cannot open shared object file: No such file or directory",
              "WARNING 08-27 13:59:59 _custom_ops.py:15] Failed to import from vllm._C with ImportError('libcudart.so"
              ".12: cannot open shared object file: No such file or directory')",
              "ImportError: /usr/local/lib/python3.10/dist-packages/torch/lib/../../nvidia/cusparse/lib/"
              "libcusparse.so.12: undefined symbol: __nvJitLinkAddData_12_1, version libnvJitLink.so.12"))

NO_KERNEL_IMAGE = Cause(
    "no_kernel_image", K,
    "the build has no kernels for this GPU's architecture (\"no kernel image is available for execution on the "
    "device\"): a wheel or image built for other compute capabilities",
    (Pattern("no kernel image is available"),
     Pattern("is not compatible with the current PyTorch installation",
             r"with CUDA capability (?P<capability>sm_\d{2,3})"
             r" is not compatible with the current PyTorch installation"),
     # FlashInfer's arch detection (its JIT compiles for the GPU with the local CUDA toolkit): a Blackwell GPU with a
     # toolkit older than the architecture needs, e.g. "SM 12.x requires CUDA >= 12.9." (vLLM 0.32's sampler re-derives
     # it the same way). vLLM prints it and goes on (case 332: the attention backend is chosen after it), so it is weak:
     # it never stops the watch, and any specific cause after it (a KV refusal, an OOM) is the verdict; alone, it names
     # the likely end of a boot that died without saying more
     Pattern("requires CUDA >=", r"SM (?P<sm>\d{1,3})\.x requires CUDA >= (?P<cuda_needed>\d{1,2}\.\d{1,2})",
             rank=WEAK)),
    ("the CUDA toolkit is older than SM {sm}.x needs (CUDA >= {cuda_needed}): install a newer toolkit (or an image "
     "built with it) so FlashInfer can compile for this GPU",
     "this build has no kernels for {capability}: use a build for this GPU",
     "this build has no kernels for this GPU's architecture: use a build (image, wheel) for it"),
    numbers=("capability", "sm", "cuda_needed"),
    examples=("RuntimeError: CUDA error: no kernel image is available for execution on the device",
              "Failed to get device capability: SM 12.x requires CUDA >= 12.9."))

EXTENSION_ABI_MISMATCH = Cause(
    "extension_abi_mismatch", K,
    "a compiled extension (vLLM's _C, flash-attn, xformers) was built against another torch (\"undefined symbol\")",
    (Pattern("undefined symbol", r"(?P<extension>[\w./-]{0,200}\.so)\S*: undefined symbol: (?P<symbol>\w{1,200})"),
     Pattern("undefined symbol"),
     Pattern("was compiled against a different", flags=re.I),
     # only a WARNING at import (≤0.6, _custom_ops.py): the boot fails later, when an op is called
     Pattern("Failed to import from vllm._C with ImportError",
             r"ImportError\('(?P<extension>[\w./-]{0,200}\.so)\S*: undefined symbol: (?P<symbol>\w{1,200})",
             rank=WEAK, any_level=True)),
    ("{extension} was built against another torch: reinstall it for this torch",
     "a compiled extension does not match this torch: reinstall it"),
    numbers=("extension", "symbol"),
    examples=("ImportError: /usr/local/lib/python3.10/dist-packages/vllm/_C.abi3.so: undefined symbol: "
              "_ZN3c104cuda9SetDeviceEi",))

BROKEN_INSTALL = Cause(
    "broken_install", K,
    "the install is incomplete or inconsistent (a module missing, a name missing from a module: packages of "
    "different releases)",
    (Pattern("No module named", r"No module named '?(?P<module>[\w.]{1,120})"),
     Pattern("cannot import name", r"cannot import name '(?P<name>\w{1,120})' from '(?P<module>[\w.]{1,120})'"),
     Pattern("Please install", r"\A\w*(?:Error|Exception):.{0,200}Please install (?P<module>[\w.-]{1,80})", rank=WEAK),
     # a launcher that runs vLLM's console script where the image has none: GPUStack 0.3.0's Docker image ("Failed to
     # run the vllm server: [Errno 2] No such file or directory: '/usr/local/bin/vllm'"), an OCI runtime's exec
     Pattern("/bin/vllm'", r"No such file or directory: '(?P<executable>[^']{0,200}/bin/vllm)'"),
     Pattern("executable file not found", r"\"?(?P<executable>vllm)\"?: executable file not found in \$PATH")),
    ("the install is broken: {module} is missing or of another release ({name}): reinstall vLLM's pinned set",
     "the install is broken: {module} is missing: reinstall vLLM's pinned set",
     "vLLM is not installed where the launcher runs it ({executable}): install it in the image or fix the command",
     "the install is broken: reinstall vLLM's pinned set"),
    numbers=("module", "name", "executable"),
    examples=("ModuleNotFoundError: No module named 'vllm._C'",
              "ImportError: cannot import name 'cached_property' from 'transformers.utils'",
              "Failed to run the vllm server: [Errno 2] No such file or directory: '/usr/local/bin/vllm'",
              "exec: \"vllm\": executable file not found in $PATH: unknown"))

NCCL_ERROR = Cause(
    "nccl_error", K,
    "NCCL failed between the ranks (a network, a P2P/IB setting, a peer that died first: its cause is above when "
    "shown)",
    (Pattern("NCCL error", r"NCCL error[^\n]{0,200}?(?::\s*(?P<nccl>unhandled (?:system|cuda) error|internal error|"
             r"invalid usage|remote process exited or there was a network error)|\Z|\.)", rank=WEAK),
     Pattern("ncclUnhandledCudaError", rank=WEAK),
     Pattern("ncclSystemError", rank=WEAK),
     Pattern("ncclInternalError", rank=WEAK),
     Pattern("ncclRemoteError", rank=WEAK),
     Pattern("DistBackendError", rank=WEAK),
     # Intel's collective library on XPU, at the first all_reduce ("RuntimeError: oneCCL: ze_fd_manager.cpp:214
     # fill_device_fds: EXCEPTION: open failed: ...")
     Pattern("oneCCL:", r"oneCCL: (?P<nccl>[^:\s]{1,80}:\d{1,6} \w{1,80}: EXCEPTION: [^,]{1,120})", rank=WEAK),
     # a rank's own NCCL_DEBUG warning: the segment a peer created is gone (attach, not create: not a full /dev/shm)
     Pattern("Error while attaching to shared memory segment", r"attaching to shared memory segment (?P<segment>"
             r"[^\s(]{1,200}) \(size (?P<shm_segment_bytes>\d{1,20})\)")),
    ("NCCL failed ({nccl}): run with NCCL_DEBUG=INFO; try NCCL_P2P_DISABLE=1 or check the interconnect",
     "NCCL failed between the ranks: run with NCCL_DEBUG=INFO; try NCCL_P2P_DISABLE=1 or check the interconnect"),
    numbers=("nccl", "segment", "shm_segment_bytes", "nccl_version"),
    also=(Also("nccl_version", r"NCCL version (\d{1,3}\.\d{1,3}(?:\.\d{1,3})?)"),),
    examples=("RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version "
              "2.21.5",))

SHM_TOO_SMALL = Cause(
    "shm_too_small", K,
    "/dev/shm is too small for the workers' shared memory (a container's 64 MB default: a \"Bus error\", "
    "\"Insufficient space in /dev/shm\")",
    (Pattern("/dev/shm", r"Insufficient space in /dev/shm[^\n]{0,80}?:\s*(?P<required_mib>\d{1,9}(?:\.\d{1,3})?)\s*MiB "
             r"required,\s*(?P<free_mib>\d{1,9}(?:\.\d{1,3})?)\s*MiB free"),
     Pattern("/dev/shm", r"(?:Insufficient space|No space left|Error while creating shared memory segment|unable to "
             r"(?:write|allocate)|No such file or directory)[^\n]{0,120}/dev/shm|/dev/shm[^\n]{0,120}(?:too small|"
             r"insufficient|No space left)"),
     Pattern("Bus error", r"\A(?:.{0,200}\s)?Bus error(?: \(core dumped\))?\s*\Z|unexpected bus error", flags=re.I),
     Pattern("bus error", r"unexpected bus error", flags=re.I),
     Pattern("insufficient shared memory", flags=re.I),
     Pattern("unable to write to file </torch_")),
    ("/dev/shm has {free_mib} MiB free of the {required_mib} MiB the workers need: run the container with --ipc=host "
     "or --shm-size (e.g. 16g)",
     "/dev/shm is too small: run the container with --ipc=host or --shm-size (e.g. 16g)"),
    numbers=("required_mib", "free_mib", "shm_segment_bytes", "errno"),
    also=(Also("shm_segment_bytes", r"\(size (\d{1,20})\)", int), Also("errno", r"\((\d{1,4})\)\s*\Z", int)),
    examples=("RuntimeError: Insufficient space in /dev/shm to create shared memory buffer",
              "RuntimeError: Insufficient space in /dev/shm for shared-memory allocation: 160 MiB required, 1 MiB "
              "free. Increase /dev/shm (e.g. --shm-size or --ipc=host).",
              "Bus error (core dumped)",
              "ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared memory "
              "(shm)."))

TIMEOUT_DISTRIBUTED_INIT = Cause(
    "timeout_distributed_init", K,
    "the ranks never met: the distributed init (the TCP store, the first collective) timed out (a peer that died, a "
    "firewall, a wrong master address)",
    (Pattern("DistStoreError", rank=WEAK),
     Pattern("client socket has timed out", rank=WEAK),
     Pattern("Watchdog caught collective operation timeout", rank=WEAK),
     Pattern("timed out after", r"(?:init_process_group|TCPStore|rendezvous|store)\b.{0,200}timed out after", rank=WEAK,
             flags=re.I)),
    ("the ranks never met: check the master address/port, the firewall, and the other ranks' logs",),
    numbers=("timeout_ms", "host", "port"),
    also=(Also("timeout_ms", r"timed out after (\d{1,12})\s*ms", int),
          Also("host", r"trying to connect to \(\[?([^,()\[\]\s]{1,100})\]?,"),
          Also("port", r"trying to connect to \([^,()]{1,100}, (\d{1,5})\)", int)),
    examples=("torch.distributed.DistStoreError: Timed out after 601 seconds waiting for clients. 1/2 clients "
              "joined.",))

TIMEOUT_ENGINE_STARTUP = Cause(
    "timeout_engine_startup", K,
    "the API server gave up waiting for the engine process (\"Timed out waiting for engine core processes to start\")",
    (Pattern("Timed out waiting for engine", rank=WEAK),
     Pattern("Did not receive response from", rank=WEAK),
     Pattern("waiting for engines to send initial message", rank=WEAK)),
    ("the engine did not start in time: its own log (above, or the engine's) names why; raise "
     "VLLM_ENGINE_READY_TIMEOUT_S if it was only slow",),
    examples=("TimeoutError: Timed out waiting for engine core processes to start. This is often caused by slow "
              "weight loading for large models.",))

RAY_PLACEMENT_ERROR = Cause(
    "ray_placement_error", K,
    "Ray could not place the workers (no node has the GPUs asked, the cluster is short of them)",
    (Pattern("placement group", r"(?:Cannot provide a placement group|placement group.{0,120}(?:timed out|cannot be "
             r"(?:scheduled|satisfied)|infeasible)|No available node types can fulfill)", flags=re.I),
     Pattern("No available node types can fulfill"),
     # the platform's Ray resource key, 0.5.5-0.32: GPU (CUDA, ROCm, XPU), TPU, HPU, neuron_cores, NPU (vllm-ascend)
     Pattern("Current node has no", r"Current node has no (?P<device>\w{1,40}) available"),
     Pattern("Ray does not allocate any GPUs on the driver node"),
     # a placement group the launcher made (Ray Serve) whose bundles vLLM 0.2 could not use
     Pattern("Placement group bundle cannot have more than")),
    ("the Ray node offers no {device} resource: start Ray there with its {device}s (or place fewer workers)",
     "Ray cannot place the workers: the cluster lacks the GPUs the parallel sizes ask"),
    numbers=("device",),
    examples=("ValueError: Current node has no NPU available. current_node_resource={'CPU': 192.0, 'GPU': 8.0}. vLLM "
              "engine cannot start without NPU.",
              "ValueError: Cannot provide a placement group of placement_group_specs=[{'GPU': 1.0}] within 1800 "
              "seconds. See `ray status` to make sure the cluster has enough resources.",))

CUDA_FORK_REINIT = Cause(
    "cuda_fork_reinit", K,
    "CUDA was initialised before the workers were forked (\"Cannot re-initialize CUDA in forked subprocess\"): a "
    "launcher that touches CUDA first, or VLLM_WORKER_MULTIPROC_METHOD=fork",
    (Pattern("Cannot re-initialize CUDA in forked subprocess"),),
    ("set VLLM_WORKER_MULTIPROC_METHOD=spawn (something initialised CUDA before the fork)",),
    examples=("RuntimeError: Cannot re-initialize CUDA in forked subprocess. To use CUDA with multiprocessing, you "
              "must use the 'spawn' start method",))

PORT_IN_USE = Cause(
    "port_in_use", K,
    "the port is taken (\"Address already in use\"): another server, or vLLM's own earlier process still holding it",
    (Pattern("ddress already in use", r"address \('?(?P<host>[^',)]{0,100})'?, (?P<port>\d{1,5})\)[^\n]{0,80}?"
             r"ddress already in use"),
     Pattern("ddress already in use"),
     Pattern("Errno 98"),
     Pattern("EADDRINUSE")),
    ("port {port} is taken (another server, or a previous vLLM still holding it): free it or pick another port",
     "the port is taken (another server, or a previous vLLM still holding it): free it or pick another port"),
    numbers=("host", "port", "errno"),
    also=(Also("errno", r"\[Errno (-?\d{1,4})\]|\bcode: (-?\d{1,4}), name: EADDRINUSE", int),
          # torch's TCPStore: "...network address. port: 32847, useIpv6: false, code: -98, name: EADDRINUSE"
          Also("port", r"\bport: (\d{1,5}), useIpv6", int)),
    examples=("OSError: [Errno 98] error while attempting to bind on address ('0.0.0.0', 8000): address already in use",
              "OSError: [Errno 98] Address already in use"))

COMPILE_FAILED = Cause(
    "compile_failed", K,
    "the torch.compile / Triton / inductor toolchain failed (no C compiler, a Triton or ptxas error, a dynamo "
    "backend failure): --enforce-eager boots without it; or an accelerator's own graph compiler failed (AWS "
    "Neuron's neuronx-cc, Gaudi's synapse graph compiler)",
    (Pattern("BackendCompilerFailed"),
     Pattern("InductorError"),
     Pattern("torch._inductor.exc"),
     Pattern("torch._dynamo.exc", r"torch\._dynamo\.exc\.(?!Unsupported)\w+"),
     Pattern("triton.compiler.errors"),
     Pattern("CompilationError", r"\A(?:[\w.]{0,80}\.)?CompilationError\b"),
     Pattern("ptxas"),
     Pattern("Failed to find C compiler"),
     Pattern("command not found", r"\b(?:gcc|cc|g\+\+|clang|nvcc): (?:command )?not found"),
     # a kernel library compiled on first use (FlashInfer's JIT; unsloth words it so when ninja is missing)
     Pattern("failed to JIT-compile"),
     # accelerators that compile every graph ahead of running it: AWS Neuron (vllm-neuron) and Intel Gaudi (HPU)
     Pattern("neuronx-cc compilation failed", r"neuronx-cc compilation failed with (?P<status>-?\d{1,4})"),
     Pattern("Graph compile failed", r"Graph compile failed\. synStatus=(?:synStatus )?(?P<status>\d{1,4})")),
    ("the compile toolchain failed: --enforce-eager skips it; else install a C compiler / fix Triton's cache",),
    numbers=("status",),
    examples=("torch._dynamo.exc.BackendCompilerFailed: backend='inductor' raised:",
              "RuntimeError: Failed to find C compiler. Please specify via CC environment variable.",
              "RuntimeError: FlashInfer failed to JIT-compile: ninja (build tool) not found.",
              "RuntimeError: neuronx-cc compilation failed with 70. Check compiler logs.",
              "RuntimeError: Graph compile failed. synStatus=synStatus 26 [Generic failure]."))

CORRUPT_CHECKPOINT = Cause(
    "corrupt_checkpoint", K,
    "a weight or config file is truncated or corrupt (an interrupted download, a Git LFS pointer instead of the file, "
    "an empty config.json)",
    (Pattern("Error while deserializing header"),
     Pattern("HeaderTooLarge"),
     Pattern("MetadataIncompleteBuffer"),
     Pattern("incomplete metadata"),
     Pattern("invalid load key"),
     Pattern("failed finding central directory"),
     Pattern("PytorchStreamReader failed"),
     # transformers reading a config.json that is empty or cut short
     Pattern("is not a valid JSON file", r"config file at '(?P<path>[^']{1,300})' is not a valid JSON file"),
     # json's own words for a file with no JSON in it at all (empty, an LFS pointer), as vLLM's pydantic config
     # validation passes them on ("Value error, Expecting value: ..."): weak, since any empty JSON text fails so
     Pattern("Expecting value: line 1 column 1",
             r"(?:Value error, |JSONDecodeError: )Expecting value: line 1 column 1 \(char 0\)", rank=WEAK)),
    ("a model file (weights or a JSON config) is corrupt or incomplete: download it again (check for LFS pointers)",),
    examples=("safetensors_rust.SafetensorError: Error while deserializing header: HeaderTooLarge",
              "RuntimeError: PytorchStreamReader failed reading zip archive: failed finding central directory",
              "OSError: It looks like the config file at '/m/config.json' is not a valid JSON file.",
              "  Value error, Expecting value: line 1 column 1 (char 0) [type=value_error, input_value=ArgsKwargs((), "
              "{'model': 'm'}), input_type=ArgsKwargs]"))

#: A directory a cache lives in: the Hub's, vLLM's, and the kernel caches (Triton, FlashInfer, torch.compile).
_CACHE_PATH = r"'(?P<path>[^'\n]{0,300}(?:cache|huggingface|\.triton|flashinfer|torch_compile)[^'\n]{0,300})'"

CACHE_DIR_UNUSABLE = Cause(
    "cache_dir_unusable", K,
    "a cache directory the server writes or reads (HF_HOME / HF_HUB_CACHE, vLLM's, Triton's, FlashInfer's) is missing, "
    "read-only or not writable by this user (huggingface_hub's CacheNotFound, Errno 13 / Errno 30 on a cache path): a "
    "mount or a user id, not the configuration",
    (Pattern("Cache directory not found", r"Cache directory not found: (?P<path>\S{1,300}?)\.?(?:\s|\Z)"),
     Pattern("Permission denied", r"Permission denied: " + _CACHE_PATH),
     Pattern("Read-only file system", r"Read-only file system: " + _CACHE_PATH)),
    ("the cache directory {path} cannot be used (missing, read-only or another user's): point HF_HOME / the cache "
     "variables at a writable directory or fix the mount",
     "a cache directory cannot be used: point HF_HOME / the cache variables at a writable directory"),
    numbers=("path",),
    examples=("huggingface_hub.errors.CacheNotFound: Cache directory not found: /data/.cache/huggingface. Please use "
              "`cache_dir` argument or set `HF_HUB_CACHE` environment variable.",
              "PermissionError: [Errno 13] Permission denied: '/home/user/cache_root/huggingface'",
              "OSError: [Errno 30] Read-only file system: '/projects/x/.cache/flashinfer'"))

HUB_RATE_LIMITED = Cause(
    "hub_rate_limited", K,
    "the Hub refused the requests for a while (HTTP 429, \"We had to rate limit you\"): too many calls from this IP or "
    "token; a cached model served by its local path, or HF_HUB_OFFLINE=1, makes none",
    (Pattern("429 Client Error", r"429 Client Error[^\n]{0,120}?(?:" + _REPO + r"|\Z|\.)"),
     Pattern("We had to rate limit you")),
    ("the Hub rate-limited the download of {model}: pass HF_TOKEN, wait, or serve the cached copy offline",
     "the Hub rate-limited the download: pass HF_TOKEN, wait, or serve the cached copy offline"),
    numbers=("model",),
    # the quota message links the Hub's docs (huggingface.co/docs/hub/rate-limits): not a repo
    also=(Also("model", r"huggingface\.co/(?:api/models/)?(?!docs/)([\w.-]{1,96}/[\w.-]{0,95}[\w-])"),),
    examples=("requests.exceptions.HTTPError: 429 Client Error: Too Many Requests for url: "
              "https://huggingface.co/api/models/Qwen/Qwen2.5-1.5B-Instruct",
              "We had to rate limit you, you hit the quota of 6000 api requests per 5 minutes period."))

DISK_FULL = Cause(
    "disk_full", K,
    "the disk the weights, the cache or a conversion are written to is full (Errno 28 \"No space left on device\", "
    "safetensors' StorageFull)",
    (Pattern("No space left on device"),
     Pattern("StorageFull")),
    ("the disk is full: free space where the model is downloaded or cached (or point HF_HOME elsewhere)",),
    examples=("OSError: [Errno 28] No space left on device",
              'Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "No space left on '
              'device" })'))


#: Order: the finer readings first (a nvJitLink symbol before any undefined symbol; offline before a bare connection
#: error; a missing config.json before the "not a valid model identifier" of the same OSError; a full /dev/shm before a
#: full disk).
CAUSES: tuple[Cause, ...] = (
    GATED_MODEL, HUB_RATE_LIMITED, HF_OFFLINE_NO_CACHE, CACHE_DIR_UNUSABLE, MISSING_CONFIG_JSON, MODEL_NOT_FOUND,
    BAD_LOCAL_PATH, TOKENIZER_ERROR, TRANSFORMERS_TOO_OLD, NO_GPU_VISIBLE, INVALID_DEVICE_ORDINAL, DRIVER_MISMATCH,
    CUDA_LIB_MISMATCH, NO_KERNEL_IMAGE,
    EXTENSION_ABI_MISMATCH, PINNED_MEMORY_UNAVAILABLE, CUDA_FORK_REINIT, SHM_TOO_SMALL, DISK_FULL, PORT_IN_USE,
    CORRUPT_CHECKPOINT, COMPILE_FAILED, BROKEN_INSTALL, RAY_PLACEMENT_ERROR, NCCL_ERROR, TIMEOUT_DISTRIBUTED_INIT,
    TIMEOUT_ENGINE_STARTUP, MODEL_INSPECTION_FAILED)
