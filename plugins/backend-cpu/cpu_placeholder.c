/* placeholder until the backend lands; replaced by backend-cpu sources */
