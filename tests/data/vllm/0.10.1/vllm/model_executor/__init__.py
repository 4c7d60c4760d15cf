# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project

from vllm.model_executor.parameter import (BasevLLMParameter,
                                           PackedvLLMParameter)
from vllm.model_executor.sampling_metadata import (SamplingMetadata,
                                                   SamplingMetadataCache)
from vllm.model_executor.utils import set_random_seed

__all__ = [
    "SamplingMetadata",
    "SamplingMetadataCache",
    "set_random_seed",
    "BasevLLMParameter",
    "PackedvLLMParameter",
]
