"""The model card an export carries (README.md), and its push to the Hugging Face Hub.

The card's metadata is what the Hub reads: the base model (a Hub id), the
library (`peft` for the adapter, `transformers` for the merged model), the
license the base's own card declares, the data set (a Hub data set id), tags
and, given an evaluation's summary.json, a model-index with its pass@k. The
text states the recipe, the data (rows, tokens), the final training and
validation losses and the evaluation with its 95% interval, all read from the
run directory (run.json, metrics.jsonl) and the export's provenance.
"""

import fnmatch
import os

from common import cli
from common import storage
from data import sources

TAGS = ("gemma4", "lora", "sft", "jax", "tpu")
LIBRARIES = {"adapter": "peft", "merged": "transformers"}
FILE = "README.md"
# Our storage's marker files (a gs:// export fetched to the cache holds them).
BOOKKEEPING = ".g4_*"


class PushError(cli.UserError):
    """The export could not be pushed to the Hub."""


def hub_dataset(source):
    """The Hub data set id of a data source (None for local files and the sample)."""
    if source.startswith(sources.HUB_FILE):
        return "/".join(source[len(sources.HUB_FILE):].split("/")[:2])
    if source.count("/") == 1 and not source.startswith((".", "/")) \
            and not os.path.exists(source) and not storage.is_url(source):
        return source
    return None


def base_license(base_dir):
    """{license, license_name, license_link} of the base's own card (empty without one)."""
    from huggingface_hub import ModelCard  # pylint: disable=import-outside-toplevel
    path = os.path.join(base_dir, FILE)
    if not os.path.exists(path):
        return {}
    data = ModelCard.load(path).data
    return {k: data.get(k) for k in ("license", "license_name", "license_link") if data.get(k)}


def losses(records):
    """(last training record, last validation record) of metrics.jsonl (None if absent)."""
    train = [r for r in records if "loss" in r]
    evals = [r for r in records if "eval_loss" in r]
    return (train[-1] if train else None), (evals[-1] if evals else None)


def _eval_results(summary):
    from huggingface_hub import EvalResult  # pylint: disable=import-outside-toplevel
    return [EvalResult(task_type="text-generation", dataset_type="verilog-eval",
                       dataset_name="VerilogEval v2 spec-to-rtl", metric_type=f"pass@{k}",
                       metric_name=f"pass@{k}", metric_value=round(float(value), 4))
            for k, value in sorted(summary["pass_at_k"].items(), key=lambda kv: int(kv[0]))]


def card(kind, *, provenance, info, records, hub_base, base_dir, model_name,
         eval_summary=None):
    """The ModelCard of an export of `kind` (adapter or merged).

    `hub_base`: the base's Hub id (None for a local base); `info`: run.json;
    `records`: metrics.jsonl; `eval_summary`: an evaluation's summary.json.
    """
    from huggingface_hub import ModelCard  # pylint: disable=import-outside-toplevel
    from huggingface_hub import ModelCardData  # pylint: disable=import-outside-toplevel
    recipe, data = info.get("recipe", {}), info.get("data", {})
    dataset = hub_dataset(data.get("source", ""))
    licensing = base_license(base_dir)
    metadata = ModelCardData(
        base_model=hub_base, library_name=LIBRARIES[kind], datasets=[dataset] if dataset
        else None, tags=[*TAGS, *(("peft",) if kind == "adapter" else ("merged",))],
        model_name=model_name, pipeline_tag="text-generation",
        eval_results=_eval_results(eval_summary) if eval_summary else None,
        **licensing)
    base = hub_base or provenance["base_model"]
    what = ("A LoRA adapter (PEFT) for" if kind == "adapter"
            else "A merged model (LoRA folded into the weights) of")
    lines = [f"# {model_name}", "",
             f"{what} `{base}`, fine-tuned on `{data.get('source', '?')}` by the TPU stack "
             f"(JAX, Qwix LoRA) and exported from its Orbax checkpoint at step "
             f"{provenance['step']}.", ""]
    serve = (f"vllm serve {base} --enable-lora --lora-modules {model_name}=PATH"
             if kind == "adapter" else "vllm serve PATH")
    lines += ["## Use", "", "```sh", serve, "```", ""]
    lora, opt = recipe.get("lora", {}), recipe.get("optimizer", {})
    lines += ["## Recipe", "", "| setting | value |", "|---|---|",
              f"| LoRA rank / alpha / dropout | {lora.get('rank')} / {lora.get('alpha')} / "
              f"{lora.get('dropout')} |",
              f"| LoRA targets | {', '.join(lora.get('targets', []))} |",
              f"| learning rate, warmup steps | {opt.get('learning_rate')}, "
              f"{recipe.get('warmup_steps')} (cosine to {opt.get('end_learning_rate')}) |",
              f"| optimizer | AdamW (b1 {opt.get('b1')}, b2 {opt.get('b2')}, weight decay "
              f"{opt.get('weight_decay')}) |",
              f"| effective batch, sequence length | {info.get('effective_batch')}, "
              f"{recipe.get('seq_len')} ({'packed' if info.get('packing') else 'padded'}) |",
              f"| steps (epochs) | {info.get('total_steps')} ({recipe.get('epochs')}) |",
              f"| machine | {info.get('machine')} ({info.get('devices')} devices) |", ""]
    lines += ["## Data", "", f"- source: `{data.get('source')}` (format {data.get('format')})",
              f"- rows: {data.get('rows_read')} read, {data.get('kept')} kept, dropped "
              f"{sum((data.get('dropped') or {}).values())} "
              f"({', '.join(f'{k} {v}' for k, v in (data.get('dropped') or {}).items()) or 'none'})"
              f"; {data.get('rows_capped', data.get('rows_not_read')) or 0} capped (not read)",
              f"- tokens: {data.get('tokens')}, of which trained (the answers): "
              f"{data.get('trained_tokens')}", ""]
    train, evaluation = losses(records)
    lines += ["## Results", ""]
    if train:
        lines.append(f"- final training loss: {train['loss']:.4f} (step {train['step']})")
    if evaluation:
        lines.append(f"- validation loss: {evaluation['eval_loss']:.4f} (step "
                     f"{evaluation['step']}, {evaluation.get('eval_tokens')} tokens)")
    if eval_summary:
        intervals = eval_summary.get("pass_at_k_interval_95", {})
        for k, value in sorted(eval_summary["pass_at_k"].items(), key=lambda kv: int(kv[0])):
            low, high = intervals.get(k, (None, None))
            span = f", 95% interval [{low:.3f}, {high:.3f}]" if low is not None else ""
            lines.append(f"- VerilogEval v2 spec-to-rtl pass@{k}: {value:.3f}{span} "
                         f"({eval_summary.get('num_problems')} problems, "
                         f"{eval_summary.get('protocol', 'upstream')} protocol)")
    lines += ["", "## License", "",
              f"This model derives from `{base}` and carries its license"
              + (f" ({licensing['license']})." if licensing.get("license")
                 else ": see the base model's card."), "",
              "## Provenance", "",
              f"`provenance.json` beside this card: the run's config, the checkpoint step, "
              f"a fingerprint of the base and the versions of "
              f"{', '.join(sorted(provenance.get('versions', {})))}.", ""]
    return ModelCard(f"---\n{metadata.to_yaml()}\n---\n\n" + "\n".join(lines))


def push_plan(written, repo_id):
    """[(Hub repo id, local directory, files)] of an export: the adapter goes to
    `repo_id`, the merged model to `repo_id` too when it is alone, else to
    `repo_id`-merged."""
    if repo_id.count("/") != 1 or not all(repo_id.split("/")):
        raise PushError(f"--push_to_hub takes ORG/NAME, got {repo_id!r}")
    plan = []
    for kind, local in sorted(written.items()):
        repo = f"{repo_id}-merged" if kind == "merged" and len(written) > 1 else repo_id
        files = sorted(os.path.relpath(os.path.join(d, f), local)
                       for d, _, found in os.walk(local) for f in found
                       if not fnmatch.fnmatch(f, BOOKKEEPING))
        plan.append((repo, local, files))
    return plan


def push(plan, private=True):
    """Creates each repo (private unless told otherwise) and uploads its folder;
    a missing token or a refusal is one PushError line."""
    from huggingface_hub import HfApi  # pylint: disable=import-outside-toplevel
    from huggingface_hub import get_token  # pylint: disable=import-outside-toplevel
    from huggingface_hub import errors  # pylint: disable=import-outside-toplevel
    import httpx  # pylint: disable=import-outside-toplevel
    if not get_token():
        raise PushError("no Hugging Face token: run `hf auth login` or set HF_TOKEN (a token "
                        "with write access to the organization)")
    api = HfApi()
    urls = []
    for repo, local, _ in plan:
        try:
            api.create_repo(repo, private=private, exist_ok=True, repo_type="model")
            urls.append(api.upload_folder(repo_id=repo, folder_path=local,
                                          commit_message="Export of a Gemma 4 LoRA run",
                                          ignore_patterns=[BOOKKEEPING]))
        except errors.HfHubHTTPError as e:
            status = getattr(e.response, "status_code", None)
            why = {401: "the token is not valid", 403: "the token may not write there"}.get(
                status, str(e).splitlines()[0])
            raise PushError(f"pushing to {repo} failed ({status}): {why}") from None
        except (OSError, ValueError, httpx.HTTPError) as e:  # no network, a timeout
            raise PushError(f"pushing to {repo} failed: {e}") from None
    return urls
