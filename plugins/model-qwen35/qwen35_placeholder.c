/* placeholder until the model plugin lands; replaced by model-qwen35 sources */
